package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/statuspage"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// statusHandler is what `run` and `dev` serve on --metrics-addr: the HTML
// status page at /, and the worker's /status.json, /healthz, /readyz and
// /metrics (from g).
func statusHandler(w *worker.Worker, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", w.Handler(g))
	mux.Handle("GET /{$}", statuspage.Handler(w.Status))
	return mux
}

// listenWithFallback listens on addr; if the port is taken, on a free port
// of the same host, and says so.
func listenWithFallback(addr string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, "", nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, "", err
	}
	host, _, serr := net.SplitHostPort(addr)
	if serr != nil {
		return nil, "", err
	}
	ln, err2 := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err2 != nil {
		return nil, "", err
	}
	return ln, fmt.Sprintf("note: metrics address %s is in use (another bloomgate?); serving metrics on %s instead", addr, ln.Addr()), nil
}
