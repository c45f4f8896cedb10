// Package release holds the tests of what make release ships: the
// container image (built by release/ociimage, opened and run here) and the
// Helm chart (deployments/helm/bloomgate, rendered by helm and decoded
// strictly into the Kubernetes API types).
//
// It is a module of its own so that go-containerregistry and the k8s.io
// modules stay out of the worker's go.mod; make test runs it.
package release
