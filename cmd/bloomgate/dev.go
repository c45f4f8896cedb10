package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/buildinfo"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/loadgen"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Topics of the demo.
const (
	devInput      = "orders"
	devOutput     = "orders-unique"
	devDuplicates = "orders-duplicates"
	devDeadLetter = "orders-dead-letter"
	devGroup      = "bloomgate-dev"

	devCheckpointInterval = 10 * time.Second
)

type devOptions struct {
	events        int
	duplicates    float64
	rate          int
	partitions    int
	checkpointURL string
	metricsAddr   string
	brokerAddr    string
	keepRunning   bool
	batchSize     int
	batchTimeout  time.Duration
	drainTimeout  time.Duration
	logLevel      string
	progressEvery time.Duration
}

// cmdDev runs the local demo: an in-process broker, the worker and a
// producer of order events with a known number of duplicates, with live
// progress and a summary once everything produced has been consumed.
func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	def := config.Default()
	var o devOptions
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.IntVar(&o.events, "events", 1_000_000, "order events the demo producer writes")
	fs.Float64Var(&o.duplicates, "duplicates", 0.2, "fraction of events that repeat an earlier order_id, in [0,1)")
	fs.IntVar(&o.rate, "rate", 0, "events per second the producer writes (0: as fast as possible)")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of every demo topic")
	fs.StringVar(&o.checkpointURL, "checkpoint-url", def.CheckpointURL, "where checkpoints go; each run writes below its own run-… subdirectory/prefix")
	fs.StringVar(&o.metricsAddr, "metrics-addr", def.MetricsAddr, "listen address for /metrics, /healthz, /readyz, /status.json (if busy, a free port is used and printed; empty: off)")
	fs.StringVar(&o.brokerAddr, "broker-listen", "127.0.0.1:0", "listen address of the embedded broker (port 0: any free port)")
	fs.BoolVar(&o.keepRunning, "keep-running", false, "after the summary keep broker and worker running (Ctrl-C stops) so you can try kcat or produce more")
	fs.IntVar(&o.batchSize, "batch-size", def.BatchSize, "worker: max records per read/produce batch")
	fs.DurationVar(&o.batchTimeout, "batch-timeout", def.BatchTimeout, "worker: max wait to fill a batch")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", time.Minute, "after the producer finished, wait at most this long without progress for the worker to consume everything")
	fs.StringVar(&o.logLevel, "log-level", "warn", "worker and broker log level on stderr: debug, info, warn, error")
	header := `Usage: bloomgate dev [flags]

The embedded default: one process runs a Kafka-protocol broker on 127.0.0.1,
the dedup worker (key json:order_id) and a producer of order events with a
known share of duplicates. Progress is shown every second; at the end a
summary compares what the worker forwarded with the producer's ground truth.

Topics: orders (input), orders-unique (output), orders-duplicates,
orders-dead-letter, each with --partitions partitions. Each run starts from
fresh state: its broker lives in memory and its checkpoints go to a new
run-<time> subdirectory of --checkpoint-url (older runs are left in place;
"make clean" removes ./.bloomgate).

Flags:
`
	if done, code := parseFlags(fs, args, header, stdout, stderr); done {
		return code
	}
	o.progressEvery = time.Second
	if err := o.validate(); err != nil {
		return exitCode(stderr, "dev", usageError{err})
	}
	if err := runDev(ctx, o, stdout, stderr); err != nil {
		return exitCode(stderr, "dev", err)
	}
	return exitOK
}

func (o devOptions) validate() error {
	var errs []error
	if o.events < 1 {
		errs = append(errs, fmt.Errorf("--events %d: want at least 1", o.events))
	}
	if !(o.duplicates >= 0 && o.duplicates < 1) {
		errs = append(errs, fmt.Errorf("--duplicates %v: want a fraction in [0,1)", o.duplicates))
	}
	if o.rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %d: want 0 (unlimited) or more", o.rate))
	}
	if o.partitions < 1 || o.partitions > 1000 {
		errs = append(errs, fmt.Errorf("--partitions %d: want 1..1000", o.partitions))
	}
	if o.drainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %v: want > 0", o.drainTimeout))
	}
	return errors.Join(errs...)
}

// devCounts are the worker's counters, summed over partitions.
type devCounts struct {
	consumed, forwarded, duplicates, deadLettered, dropped float64
}

func gatherCounts(g prometheus.Gatherer) devCounts {
	var c devCounts
	mfs, err := g.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		var dst *float64
		switch mf.GetName() {
		case "bloomgate_records_consumed_total":
			dst = &c.consumed
		case "bloomgate_records_forwarded_total":
			dst = &c.forwarded
		case "bloomgate_records_duplicates_total":
			dst = &c.duplicates
		case "bloomgate_records_dead_lettered_total":
			dst = &c.deadLettered
		case "bloomgate_records_dropped_total":
			dst = &c.dropped
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			*dst += m.GetCounter().GetValue()
		}
	}
	return c
}

func runDev(ctx context.Context, o devOptions, stdout, stderr io.Writer) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", o.logLevel)}
	}
	tty := isTerminal(stderr)
	// Log lines must not land in the middle of a progress line.
	lw := &lineWriter{w: stderr, tty: tty}
	logger := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: lvl}))

	runID := "run-" + time.Now().UTC().Format("20060102T150405Z")
	cpURL, err := devCheckpointURL(o.checkpointURL, runID)
	if err != nil {
		return usageError{fmt.Errorf("--checkpoint-url: %w", err)}
	}

	// 1. Broker.
	var topics []broker.TopicSpec
	for _, t := range []string{devInput, devOutput, devDuplicates, devDeadLetter} {
		topics = append(topics, broker.TopicSpec{Name: t, Partitions: o.partitions})
	}
	b, err := broker.New(broker.Config{Listen: o.brokerAddr, Topics: topics, Logger: logger.With("component", "broker")})
	if err != nil {
		return usageError{fmt.Errorf("--broker-listen: %w", err)}
	}
	defer b.Close()

	// 2. Worker.
	cfg := config.Default()
	cfg.Brokers = []string{b.Addr()}
	cfg.Group = devGroup
	cfg.Input, cfg.Output, cfg.Duplicates, cfg.DeadLetter = devInput, devOutput, devDuplicates, devDeadLetter
	cfg.Key = "json:order_id"
	cfg.OnMissingKey = config.OnMissingDeadLetter
	cfg.Capacity = uint64(max(1000, o.events))
	cfg.CheckpointURL = cpURL
	cfg.CheckpointInterval = devCheckpointInterval
	cfg.MaxCheckpointStaleness = 10 * cfg.CheckpointInterval
	cfg.BatchSize = o.batchSize
	cfg.BatchTimeout = o.batchTimeout
	cfg.MetricsAddr = "" // served below, with a fallback port
	cfg.LogLevel = o.logLevel
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), buildinfo.Collector())
	w, store, err := newWorker(ctx, &cfg, logger, reg)
	if err != nil {
		return err
	}
	defer store.Close()

	metricsAddr := ""
	if o.metricsAddr != "" {
		ln, note, err := listenWithFallback(o.metricsAddr)
		if err != nil {
			return usageError{fmt.Errorf("--metrics-addr %s: %w", o.metricsAddr, err)}
		}
		metricsAddr = ln.Addr().String()
		if note != "" {
			fmt.Fprintln(stderr, note)
		}
		srv := &http.Server{Handler: statusHandler(w, reg), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer shutdownHTTP(srv)
	}

	fmt.Fprintf(stderr, "bloomgate dev (version %s): broker, worker and demo producer in one process\n", buildinfo.String())
	fmt.Fprintf(stderr, "  broker       %s (in-process, memory only), topics %s/%s/%s/%s with %d partitions\n",
		b.Addr(), devInput, devOutput, devDuplicates, devDeadLetter, o.partitions)
	fmt.Fprintf(stderr, "  worker       group %s, key json:order_id, capacity %d keys, fpr %g, window %s\n", devGroup, cfg.Capacity, cfg.FPR, cfg.Window)
	fmt.Fprintf(stderr, "  checkpoints  %s (every %s and at shutdown)\n", cpURL, cfg.CheckpointInterval)
	if metricsAddr != "" {
		fmt.Fprintf(stderr, "  status       http://%s/  (also /metrics, /status.json, /readyz)\n", metricsAddr)
	}
	fmt.Fprintf(stderr, "  producer     %d order events, %.0f%% duplicates, rate %s\n\n", o.events, 100*o.duplicates, rateText(o.rate))

	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()

	// 3. Producer, once the worker has joined (so the throughput shown is
	// the worker's, not a backlog drained later).
	if exited, err := waitReady(ctx, w, werr, 60*time.Second); err != nil {
		stopWorker()
		if ctx.Err() != nil {
			if !exited {
				<-werr
			}
			fmt.Fprintln(stderr, "interrupted before the worker was ready; stopped")
			return nil
		}
		return err
	}
	var produced atomic.Int64
	lgCfg := loadgen.Config{
		GenConfig: loadgen.GenConfig{Kind: loadgen.KindOrder, Count: o.events, Duplicates: o.duplicates, Seed: uint64(time.Now().UnixNano())},
		Brokers:   []string{b.Addr()},
		Topic:     devInput,
		Rate:      o.rate,
		Progress:  func(s loadgen.Stats) { produced.Store(s.Events) },
	}
	lgCfg.ProgressInterval = 200 * time.Millisecond
	start := time.Now()
	type lgResult struct {
		st  loadgen.Stats
		err error
	}
	lgDone := make(chan lgResult, 1)
	lgCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	go func() {
		st, err := loadgen.Run(lgCtx, lgCfg)
		produced.Store(st.Events)
		lgDone <- lgResult{st, err}
	}()

	// 4. Progress until the producer is done and everything was consumed.
	pr := &progress{w: stderr, tty: tty, lw: lw, start: start}
	tick := time.NewTicker(o.progressEvery)
	defer tick.Stop()
	var (
		lg          *lgResult
		lastChange  = time.Now()
		lastTotal   float64
		drained     bool
		interrupted bool
		workerErr   error
		workerDone  bool
	)
loop:
	for {
		select {
		case <-ctx.Done():
			interrupted = true
			break loop
		case err := <-werr:
			workerErr, workerDone = err, true
			break loop
		case r := <-lgDone:
			lg = &r
			if r.err != nil && ctx.Err() == nil {
				stopWorker()
				pr.finish()
				return fmt.Errorf("demo producer: %w", r.err)
			}
		case <-tick.C:
		}
		c := gatherCounts(reg)
		pr.line(produced.Load(), c)
		if c.consumed != lastTotal {
			lastTotal, lastChange = c.consumed, time.Now()
		}
		if lg != nil && c.consumed >= float64(lg.st.Events) {
			drained = true
			break loop
		}
		if lg != nil && time.Since(lastChange) > o.drainTimeout {
			break loop
		}
	}
	elapsed := time.Since(start)
	pr.finish()

	if o.keepRunning && drained && !workerDone && !interrupted {
		writeDevSummary(stdout, devSummary{
			opts: o, lg: lg.st, counts: gatherCounts(reg), elapsed: elapsed, drained: true, keepRunning: true,
			cpURL: cpURL, baseURL: o.checkpointURL, sizes: checkpointSizes(store), metricsAddr: metricsAddr,
		})
		fmt.Fprintf(stdout, "\nBroker %s and the worker keep running; Ctrl-C stops them (final checkpoints are written then).\n", b.Addr())
		fmt.Fprintf(stdout, "  kcat -b %s -C -t %s -e -f '%%p %%o %%k %%h %%s\\n' | head\n", b.Addr(), devOutput)
		fmt.Fprintf(stdout, "  bloomgate loadgen --brokers %s --topic %s --count 100000\n", b.Addr(), devInput)
		if metricsAddr != "" {
			fmt.Fprintf(stdout, "  open http://%s/ (status page), curl -s http://%s/metrics\n", metricsAddr, metricsAddr)
		}
		select {
		case <-ctx.Done():
		case workerErr = <-werr:
			workerDone = true
		}
		fmt.Fprintln(stderr, "stopping: worker flushes, commits and writes final checkpoints ...")
		stopWorker()
		if !workerDone {
			workerErr = <-werr
		}
		b.Close()
		if workerErr != nil {
			return fmt.Errorf("worker: %w", workerErr)
		}
		c := gatherCounts(reg)
		fmt.Fprintf(stdout, "stopped after %.0f consumed, %.0f forwarded, %.0f duplicates; checkpoints in %s\n",
			c.consumed, c.forwarded, c.duplicates, cpURL)
		return nil
	}

	// 5. Ordered shutdown: the worker flushes, commits and writes its final
	// checkpoints before the broker goes away.
	fmt.Fprintln(stderr, "stopping: worker flushes, commits and writes final checkpoints ...")
	stopWorker()
	if !workerDone {
		workerErr = <-werr
	}
	if lg == nil {
		stopProducer()
		r := <-lgDone // returns soon once cancelled
		lg = &r
	}
	final := gatherCounts(reg)
	sizes := checkpointSizes(store)
	b.Close()

	writeDevSummary(stdout, devSummary{
		opts: o, lg: lg.st, counts: final, elapsed: elapsed, drained: drained, interrupted: interrupted,
		cpURL: cpURL, baseURL: o.checkpointURL, sizes: sizes, metricsAddr: metricsAddr, workerErr: workerErr,
	})
	if workerErr != nil {
		return fmt.Errorf("worker: %w", workerErr)
	}
	if !drained && !interrupted {
		return fmt.Errorf("the worker consumed %.0f of %d events within --drain-timeout %s", final.consumed, lg.st.Events, o.drainTimeout)
	}
	return nil
}

// waitReady waits until the worker has joined the group and restored every
// assigned partition.
func waitReady(ctx context.Context, w workerStatus, werr <-chan error, limit time.Duration) (exited bool, err error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s := w.Status(); s.Ready && len(s.Assigned) > 0 {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err := <-werr:
			if err == nil {
				err = errors.New("stopped before it was ready")
			}
			return true, fmt.Errorf("worker: %w", err)
		case <-deadline.C:
			return false, fmt.Errorf("worker not ready after %s (joining the group, restoring partitions)", limit)
		case <-t.C:
		}
	}
}

// devCheckpointURL puts the run's checkpoints below runID, so that every
// run starts with empty filters: the demo broker is in memory, a new run's
// topics start at offset 0 and must not meet the previous run's state.
func devCheckpointURL(raw, runID string) (string, error) {
	raw = absFileURLArg(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "file", "s3", "mem":
	default:
		return "", fmt.Errorf("%q: use file:///dir, s3://bucket/prefix or mem://name", raw)
	}
	if u.Scheme == "file" {
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return "", err
		}
		// Two runs started within the same second get distinct directories.
		base := runID
		for i := 2; ; i++ {
			err := os.Mkdir(filepath.Join(u.Path, runID), 0o755)
			if err == nil {
				break
			}
			if !errors.Is(err, os.ErrExist) || i > 100 {
				return "", err
			}
			runID = fmt.Sprintf("%s-%d", base, i)
		}
	}
	u.Path = path.Join("/", u.Path, runID)
	if u.Scheme != "file" && u.Path == "/"+runID && u.Host == "" {
		return "", fmt.Errorf("%q: missing bucket or name", raw)
	}
	return u.String(), nil
}

type cpSizes struct {
	partitions  int
	bytes       int64 // referenced by the newest manifests
	storedBytes int64 // everything stored
	objects     int
	estKeys     uint64
	err         error
}

func checkpointSizes(store *checkpoint.Store) cpSizes {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := checkpoint.Inspect(ctx, store)
	if err != nil {
		return cpSizes{err: err}
	}
	var s cpSizes
	for _, p := range rep.Partitions {
		s.partitions++
		s.bytes += p.Bytes
		s.storedBytes += p.StoredBytes
		s.objects += p.Objects
		s.estKeys += p.EstKeys
	}
	return s
}

type devSummary struct {
	opts        devOptions
	lg          loadgen.Stats
	counts      devCounts
	elapsed     time.Duration
	drained     bool
	interrupted bool
	keepRunning bool // summary printed while broker and worker go on
	cpURL       string
	baseURL     string
	sizes       cpSizes
	metricsAddr string
	workerErr   error
}

func writeDevSummary(w io.Writer, s devSummary) {
	c := s.counts
	fp := float64(s.lg.Unique) - c.forwarded
	fmt.Fprintln(w)
	switch {
	case s.drained && !s.interrupted && s.keepRunning:
		fmt.Fprintln(w, "Summary of the demo data (every produced event was consumed)")
	case s.drained && !s.interrupted:
		fmt.Fprintln(w, "Summary (every produced event was consumed)")
	case s.interrupted:
		fmt.Fprintln(w, "Summary (interrupted: counts so far)")
	default:
		fmt.Fprintln(w, "Summary (INCOMPLETE: the worker did not consume every produced event)")
	}
	rate := 0.0
	if s.elapsed > 0 {
		rate = c.consumed / s.elapsed.Seconds()
	}
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "  %-20s %s\n", k, fmt.Sprintf(format, a...)) }
	row("produced", "%d events: %d unique order_ids + %d duplicates (ground truth)", s.lg.Events, s.lg.Unique, s.lg.Duplicates)
	row("consumed", "%.0f", c.consumed)
	row("forwarded", "%.0f  -> %s", c.forwarded, devOutput)
	row("duplicates", "%.0f  -> %s", c.duplicates, devDuplicates)
	row("dead-lettered", "%.0f  -> %s", c.deadLettered, devDeadLetter)
	if c.dropped > 0 {
		row("dropped", "%.0f", c.dropped)
	}
	row("conservation", "%s (consumed = forwarded + duplicates + dead-lettered + dropped)",
		okText(c.consumed == c.forwarded+c.duplicates+c.deadLettered+c.dropped))
	if !s.drained || float64(s.lg.Events) != c.consumed {
		row("false positives", "not measured: not every produced event was consumed")
	} else if s.lg.Unique > 0 {
		if fp >= 0 {
			row("false positives", "%.0f = unique order_ids - forwarded, %.4f%% of unique keys (filter target %g%%)",
				fp, 100*fp/float64(s.lg.Unique), 100*config.Default().FPR)
		} else {
			row("false positives", "%.0f: %.0f more events forwarded than unique keys were written (a replay after a restart?)", fp, -fp)
		}
	}
	row("throughput", "%.0f events/s (%.0f consumed in %s, producer and worker sharing this machine)", rate, c.consumed, s.elapsed.Round(100*time.Millisecond))
	if s.sizes.err != nil {
		row("checkpoints", "%s (could not inspect: %v)", s.cpURL, s.sizes.err)
	} else {
		if s.keepRunning {
			row("checkpoints", "%s (periodic ones so far)", s.cpURL)
		} else {
			row("checkpoints", "%s", s.cpURL)
		}
		if s.sizes.bytes == 0 {
			row("", "%d partitions claimed, no filter state written yet (every %s, and at shutdown)", s.sizes.partitions, devCheckpointInterval)
		} else {
			row("", "%d partitions, %s in the newest checkpoints (%s stored, %d objects), ~%d keys estimated",
				s.sizes.partitions, bytesText(s.sizes.bytes), bytesText(s.sizes.storedBytes), s.sizes.objects, s.sizes.estKeys)
		}
	}
	row("fresh state", "every run writes to a new run-… directory: the demo broker is in memory and")
	row("", "its offsets restart at 0, so old filter state must not be restored (make clean)")
	if s.workerErr != nil {
		row("worker error", "%v", s.workerErr)
	}
	fmt.Fprintln(w, "\nNext:")
	fmt.Fprintf(w, "  bloomgate inspect %s\n", s.cpURL)
	fmt.Fprintln(w, "  bloomgate dev --events 5000000 --rate 200000 --keep-running   # a longer run; watch /metrics meanwhile")
	fmt.Fprintln(w, "  bloomgate run --brokers kafka-1:9092 --input orders --output orders-unique \\")
	fmt.Fprintln(w, "      --key json:order_id --capacity 50M --checkpoint-url s3://my-bucket/bloomgate   # a real cluster")
	fmt.Fprintln(w, "  bloomgate run --help                                          # every setting")
}

func okText(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISMATCH"
}

func rateText(r int) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d/s", r)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// workerStatus is what the demo reads of the worker.
type workerStatus interface{ Status() worker.Status }

// progress prints one line per tick: rewritten in place on a terminal,
// one line each otherwise.
type progress struct {
	w      io.Writer
	tty    bool
	lw     *lineWriter
	start  time.Time
	last   time.Time
	lastC  float64
	active bool
}

func (p *progress) line(produced int64, c devCounts) {
	now := time.Now()
	rate := 0.0
	if !p.last.IsZero() && now.Sub(p.last) > 0 {
		rate = (c.consumed - p.lastC) / now.Sub(p.last).Seconds()
	} else if d := now.Sub(p.start); d > 0 {
		rate = c.consumed / d.Seconds()
	}
	p.last, p.lastC = now, c.consumed
	s := fmt.Sprintf("[%5.1fs] produced %d  consumed %.0f  forwarded %.0f  duplicates %.0f  dead-lettered %.0f  %.0f events/s",
		now.Sub(p.start).Seconds(), produced, c.consumed, c.forwarded, c.duplicates, c.deadLettered, rate)
	p.lw.mu.Lock()
	defer p.lw.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		p.active = true
		p.lw.open = true
	} else {
		fmt.Fprintln(p.w, s)
	}
}

func (p *progress) finish() {
	p.lw.mu.Lock()
	defer p.lw.mu.Unlock()
	if p.active {
		fmt.Fprintln(p.w)
		p.active = false
		p.lw.open = false
	}
}

// lineWriter serialises log output with the progress line: on a terminal a
// log line first ends the progress line in place.
type lineWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	open bool
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		fmt.Fprint(l.w, "\r\033[K")
		l.open = false
	}
	return l.w.Write(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
