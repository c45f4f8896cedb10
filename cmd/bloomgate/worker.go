package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/buildinfo"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/gcbudget"
	"github.com/bloomgate/bloomgate/internal/httpserve"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/repartition"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// runWorker runs the dedup worker until ctx ends, then waits for its ordered
// shutdown (stop fetching, flush, commit, checkpoint).
// exactHeadroom is the GC allowance of exact mode (gcbudget.Pacer).
const exactHeadroom = 16 << 20

func runWorker(ctx context.Context, cfg *config.Run, logger *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector(),
	)

	var hop *repartition.Repartitioner
	if cfg.Repartition {
		var err error
		if hop, err = newRepartition(ctx, cfg, logger, reg); err != nil {
			return err
		}
	}
	w, store, state, err := newWorker(ctx, cfg, logger, reg)
	if err != nil {
		return err
	}
	defer store.Close()
	defer closeState(state, logger)

	// The filters are live heap for good: keep the garbage allowed
	// between collections small instead of as large as the filters.
	// Exact mode allocates about four times as much per event (its held
	// adds and runs): at the default 4 MiB it spent 17 % more CPU per
	// event than at 16 MiB (docs/benchmarks-journal.md, "Fetched buffers reused,
	// and the allowance").
	headroom := uint64(gcbudget.DefaultHeadroom)
	if cfg.Exact {
		headroom = exactHeadroom
	}
	if cfg.MetricsAddr != "" {
		stopHTTP, err := serveHTTP(cfg.MetricsAddr, statusHandler(w, reg), logger)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	pacer := &gcbudget.Pacer{Headroom: headroom, OnChange: func(live uint64, pct int) {
		logger.Debug("GC percentage set for the live heap", "live_bytes", live, "gc_percent", pct)
	}}
	return runStages(ctx, w, hop, pacer, logger)
}

// runStages runs the worker, the repartition hop (nil: none) and the GC
// pacer as one run.Group until ctx ends or a stage stops: either stage
// stopping stops the other (both stages in this process), and the pacer
// runs until both have returned. It returns the worker's error, else the
// hop's.
func runStages(ctx context.Context, w *worker.Worker, hop *repartition.Repartitioner, pacer *gcbudget.Pacer, logger *slog.Logger) error {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var g oklog.Group
	var stages sync.WaitGroup
	var werr, herr error
	stages.Add(1)
	g.Add(func() error {
		defer stages.Done()
		werr = w.Run(sctx)
		return werr
	}, func(error) { stop() })
	if hop != nil {
		stages.Add(1)
		g.Add(func() error {
			defer stages.Done()
			if herr = hop.Run(sctx); herr != nil {
				logger.Error("repartition hop stopped", "err", herr)
			}
			return herr
		}, func(error) { stop() })
	}
	pctx, stopPacer := context.WithCancel(context.Background())
	g.Add(func() error { return pacer.Run(pctx) }, func(error) {
		stages.Wait()
		stopPacer()
	})
	_ = g.Run() // the first to return; the worker's error comes first
	if werr != nil {
		return workerErr(werr)
	}
	if herr != nil {
		return workerErr(fmt.Errorf("repartition hop: %w", herr))
	}
	return nil
}

// workerErr marks configuration errors: the topics, checkpoints written
// with another key definition or filter kind, and failures that waiting
// does not fix (refused logins, missing ACLs, TLS settings).
func workerErr(err error) error {
	var refused *brokercheck.Error
	if errors.Is(err, worker.ErrTopicConfig) || errors.Is(err, worker.ErrIncompatible) || errors.As(err, &refused) {
		return usageError{err}
	}
	return err
}

// newRepartition builds the first hop of --repartition and creates its
// topic, so that the dedup stage finds it at start.
func newRepartition(ctx context.Context, cfg *config.Run, logger *slog.Logger, reg prometheus.Registerer) (*repartition.Repartitioner, error) {
	ex, err := cfg.Extractor()
	if err != nil {
		return nil, usageError{fmt.Errorf("key: %w", err)}
	}
	dialer, err := cfg.Dialer()
	if err != nil {
		return nil, usageError{err}
	}
	transport, err := cfg.Transport()
	if err != nil {
		return nil, usageError{err}
	}
	iso := fetcher.ReadCommitted
	if cfg.IsolationLevel == config.ReadUncommitted {
		iso = fetcher.ReadUncommitted
	}
	hop, err := repartition.New(repartition.Config{
		Brokers: cfg.Brokers, Group: cfg.RepartitionTopic(), Input: cfg.Input, Output: cfg.RepartitionTopic(),
		PartitionsLike: cfg.Output, Isolation: iso,
		BatchSize: cfg.BatchSize,
		// The hop writes the same records: the same batch bound, timings
		// and placing of records the repartition topic cannot take.
		MaxBatchBytes: cfg.MaxBatchBytes, CommitInterval: cfg.CommitInterval, WriteTimeout: cfg.WriteTimeout,
		DeadLetter: cfg.DeadLetter, OnUnwritable: worker.UnwritablePolicy(cfg.OnUnwritable),
		SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		RebalanceTimeout: cfg.RebalanceTimeout, JoinGroupBackoff: cfg.JoinGroupBackoff,
		InstanceID: cfg.InstanceID(), Compression: cfg.RepartitionCompression(),
		Dialer: dialer, Transport: transport, SASLUsername: cfg.SASL.Username,
	}, ex, logger, reg)
	if err != nil {
		return nil, usageError{err}
	}
	if err := hop.EnsureOutput(ctx); err != nil {
		return nil, workerErr(err)
	}
	return hop, nil
}

// newWorker builds the worker, its checkpoint store and its state store
// from the settings. The caller closes the state store (closeState) and
// then the checkpoint store after Run returns.
func newWorker(ctx context.Context, cfg *config.Run, logger *slog.Logger, reg prometheus.Registerer) (_ *worker.Worker, _ *checkpoint.Store, _ *memory.Store, err error) {
	ex, err := cfg.Extractor()
	if err != nil {
		return nil, nil, nil, usageError{fmt.Errorf("key: %w", err)}
	}
	keyID := cfg.KeyIdentity()
	if cfg.Repartition {
		// The first hop keys every record by the hash of its canonical key
		// (the worker reads the hop's topic: WorkerConfig).
		if ex, err = keys.NewExtractor("key", "none", 0); err != nil {
			return nil, nil, nil, err
		}
	}
	wcfg, err := cfg.WorkerConfig()
	if err != nil {
		return nil, nil, nil, usageError{err}
	}
	store, err := checkpoint.Open(ctx, cfg.CheckpointURL, checkpoint.Options{
		Logger:     logger.With("component", "checkpoint"),
		Registerer: reg,
		Retain:     cfg.CheckpointRetain,
		// Generation objects are already compressed page by page by the
		// filter's format (zstd only where it gains), so a second pass
		// would only cost CPU.
		Compression: "none",
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening checkpoint store %s: %w", checkpoint.RedactURL(cfg.CheckpointURL), err)
	}
	defer func() {
		if err != nil {
			store.Close()
		}
	}()
	state := memory.New(store, cfg.Group)
	state.MaxTimeJump = cfg.MaxTimeJump
	state.Kind = cfg.Filter
	state.Key = keyID
	state.Isolation = worker.IsolationLevel(cfg.IsolationLevel)
	if cfg.Exact {
		state.Exact = memory.ExactOptions{Dir: cfg.ExactDir, Registerer: reg, Logger: logger.With("component", "exact")}
		if err := os.MkdirAll(cfg.ExactDir, 0o755); err != nil {
			return nil, nil, nil, usageError{fmt.Errorf("--exact-dir %s: %w; give it a writable directory (in a container: a writable volume "+
				"sized for the plan, docs/deploy.md \"Exact mode\")", cfg.ExactDir, unwrapPathError(err))}
		}
		logger.Info("exact mode: the filter's positives are confirmed in a local store of key hashes", "exact_dir", cfg.ExactDir)
	}
	var seedEx worker.Extractor
	if cfg.SeedTopic != "" {
		sx, err := cfg.SeedExtractor()
		if err != nil {
			return nil, nil, nil, usageError{fmt.Errorf("seed-key: %w", err)}
		}
		seedEx = sx
	}
	w, err := worker.New(wcfg, worker.Deps{
		Logger:        logger,
		Registerer:    reg,
		State:         state,
		Extractor:     ex,
		SeedExtractor: seedEx,
	})
	if err != nil {
		return nil, nil, nil, usageError{err}
	}
	if err := checkCreateOnly(ctx, store, cfg.CheckpointSkipCreateOnlyCheck, createOnlyCheckTimeout, logger); err != nil {
		return nil, nil, nil, err
	}
	return w, store, state, nil
}

// closeState closes the partitions' exact stores (exact mode).
func closeState(state *memory.Store, logger *slog.Logger) {
	if err := state.Close(); err != nil {
		logger.Warn("closing exact stores", "err", err)
	}
}

// createOnlyCheckTimeout bounds the start-up check of the checkpoint
// store: a store that does not answer is retried as long as brokers are
// (brokercheck.StartupBound), long enough for it to restart.
const createOnlyCheckTimeout = brokercheck.StartupBound

// checkCreateOnly refuses a checkpoint store that ignores create-only
// writes: fencing of a stale partition owner rests on them, and such a
// store would turn it off without any error. A store that does not answer
// (connection refused, timeouts, 5xx) is retried for bound, each retry
// logged with the time left, then reported naming --checkpoint-url; one
// that answers with a failure waiting does not fix (no credentials, a
// directory it may not write) is reported at once, naming the setting and
// the fix (checkpoint.Explain).
func checkCreateOnly(ctx context.Context, store *checkpoint.Store, skip bool, bound time.Duration, logger *slog.Logger) error {
	if skip {
		logger.Warn("create-only check of the checkpoint store SKIPPED (--checkpoint-skip-create-only-check): "+
			"if the store ignores create-only writes, a stale owner of a partition is NOT fenced and two workers can overwrite each other's checkpoints",
			"checkpoint_store", store.URL())
		return nil
	}
	start := time.Now()
	deadline := start.Add(bound)
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	wait := 200 * time.Millisecond
	var last error // the last failure that says more than the bound's own deadline
	for attempts := 1; ; attempts++ {
		err := store.VerifyCreateOnly(cctx)
		unreachable := errors.Is(err, checkpoint.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
		if last == nil || !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, checkpoint.ErrCreateOnlyIgnored):
			return usageError{fmt.Errorf("%w; two workers could then both write the same checkpoint sequence and a stale owner "+
				"of a partition would not be fenced. Use a store that honours conditional writes (If-None-Match: * on PutObject, "+
				"as AWS S3, current MinIO and versitygw do; or file://), or, only if no more than one worker ever writes to this "+
				"location, set --checkpoint-skip-create-only-check (see docs/checkpoints.md)", err)}
		case ctx.Err() != nil:
			return err
		case !unreachable:
			var se *checkpoint.StoreError
			if err := checkpoint.Explain(store.URL(), err); errors.As(err, &se) {
				logger.Debug("checkpoint store refused the create-only check", "err", se.Unwrap())
				return usageError{err}
			}
			return fmt.Errorf("--checkpoint-url %s: %w", store.URL(), err)
		}
		left := time.Until(deadline)
		if left <= 0 || cctx.Err() != nil {
			noun := "attempts"
			if attempts == 1 {
				noun = "attempt"
			}
			return fmt.Errorf("--checkpoint-url %s: the store did not answer in %d %s over %s (the start-up bound, as for --brokers); "+
				"last error: %w; check the endpoint and that this host can reach it", store.URL(), attempts, noun, bound, last)
		}
		d := min(wait, left)
		logger.Warn("checkpoint store unreachable; retrying until the start-up bound, then stopping",
			"checkpoint_store", store.URL(), "err", err, "retry_in", d.Round(time.Millisecond),
			"start_up_bound", bound, "gives_up_in", left.Round(time.Second))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// serveHTTP starts the metrics/health endpoint (within httpserve's bounds)
// and returns the function that stops it and waits until it has stopped.
// A port that cannot be bound is a start-up error, not something to log
// and ignore.
func serveHTTP(addr string, h http.Handler, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, usageError{fmt.Errorf("--metrics-addr %s is in use (another worker on this host?): give each worker its own "+
			"--metrics-addr (host:0 takes any free port, \"\" serves none): %w", addr, err)}
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("--metrics-addr %s: %w", addr, err)}
	}
	srv := httpserve.New(ln, h, httpserve.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Run(ctx); err != nil {
			logger.Error("metrics endpoint stopped", "err", err)
		}
	}()
	logger.Info("serving /, /status.json, /metrics, /healthz, /readyz", "addr", ln.Addr().String())
	return func() { cancel(); <-done }, nil
}

// unwrapPathError drops the operation and path a *PathError repeats, for a
// message that names the path itself.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot create %s: %w", pe.Path, pe.Err)
	}
	return err
}
