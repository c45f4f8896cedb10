package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// selfSigned returns a server certificate for 127.0.0.1 and the PEM file of
// the CA that signed it.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bloomgate test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caFile
}

func TestTLS(t *testing.T) {
	cert, caFile := selfSigned(t)
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"t", 1}}, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "t", BatchTimeout: time.Millisecond,
		Transport: &kafka.Transport{TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("over tls")}); err != nil {
		t.Fatalf("producing over TLS: %v", err)
	}
	plain := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "t", MaxAttempts: 1}
	defer plain.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	if err := plain.WriteMessages(ctx2, kafka.Message{Value: []byte("plain")}); err == nil {
		t.Fatal("plaintext client accepted by a TLS broker")
	}
}

// TestSASLOverTLS: with SASL the broker terminates TLS itself (sasl.go);
// clients authenticate over it, and a wrong password gets error 58.
func TestSASLOverTLS(t *testing.T) {
	cert, caFile := selfSigned(t)
	b, _, _ := start(t, Config{
		Topics: []TopicSpec{{"t", 1}},
		TLS:    &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:  []User{{Mechanism: "SCRAM-SHA-256", Username: "bob", Password: "pw"}},
	})
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pass := range []string{"pw", "wrong"} {
		tr := &kafka.Transport{TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, SASL: mechanism(t, "SCRAM-SHA-256", "bob", pass)}
		_, err := (&kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: tr}).Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"t"}})
		switch {
		case pass == "pw" && err != nil:
			t.Errorf("TLS and SASL with the right password: %v", err)
		case pass == "wrong" && !errors.Is(err, kafka.SASLAuthenticationFailed):
			t.Errorf("TLS and SASL with a wrong password: got %v, want error 58", err)
		}
	}
}
