package main

import (
	"net/http"

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
