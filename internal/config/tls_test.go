package config

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTLSFiles(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(append(minimal, "--tls-enabled", "--tls-ca-file", certFile, "--tls-cert-file", certFile, "--tls-key-file", keyFile), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("valid TLS files rejected: %v", err)
	}
	tc, err := cfg.TLSConfig()
	if err != nil || tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Fatalf("TLSConfig() = %+v, %v", tc, err)
	}
	d, err := cfg.Dialer()
	if err != nil || d.TLS == nil {
		t.Fatalf("Dialer() = %+v, %v", d, err)
	}
	// The key does not match another certificate: reported on --tls-enabled.
	_, err = Load(append(minimal, "--tls-enabled", "--tls-cert-file", certFile, "--tls-key-file", certFile), &bytes.Buffer{})
	if err == nil {
		t.Fatal("certificate given as key accepted")
	}
}
