package main

// The container image is built FROM scratch (release/ociimage): it has no
// /etc/ssl/certs. TLS to brokers (--tls-enabled with system roots) and to
// S3 endpoints then verifies against Mozilla's roots compiled into the
// executable. The fallback is used only where the system has no roots of
// its own; anywhere else (a distro, a distroless base, SSL_CERT_FILE) the
// system's win. The roots are as new as the module version in go.mod.
import _ "golang.org/x/crypto/x509roots/fallback"
