package worker_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Wiring the worker with the real filter, checkpoint store and extractor.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.Default()
	reg := prometheus.NewRegistry()

	store, err := checkpoint.Open(ctx, "file:///var/lib/bloomgate/checkpoints",
		checkpoint.Options{Logger: log, Registerer: reg})
	if err != nil {
		log.Error("opening checkpoint store", "err", err)
		return
	}
	defer store.Close()
	ex, err := keys.NewExtractor("json:order_id", "none", 4096)
	if err != nil {
		log.Error("key spec", "err", err)
		return
	}
	w, err := worker.New(worker.Config{
		Brokers: []string{"127.0.0.1:9092"},
		Group:   "bloomgate",
		Input:   "orders", Output: "orders-unique", Duplicates: "orders-duplicates",
		Filter: worker.FilterParams{Window: 24 * time.Hour, Generations: 4, Capacity: 10_000_000, FPR: 0.01},
	}, worker.Deps{Logger: log, Registerer: reg, State: memory.New(store, "bloomgate"), Extractor: ex})
	if err != nil {
		log.Error("worker config", "err", err)
		return
	}
	srv := &http.Server{Addr: "127.0.0.1:9464", Handler: w.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	defer srv.Close()
	if err := w.Run(ctx); err != nil { // returns after SIGTERM's ordered shutdown
		log.Error("worker stopped", "err", err)
	}
}
