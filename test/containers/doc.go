// Package containers runs tests of bloomgate against servers in containers
// (testcontainers-go): the checkpoint store's acceptance suite against
// MinIO. It is a module of its own, so that testcontainers and what it
// brings (Docker's client, OpenTelemetry, gRPC) stay out of bloomgate's
// go.mod and go.sum. Its tests need a Docker engine and skip with the
// reason where there is none; make test runs them.
package containers
