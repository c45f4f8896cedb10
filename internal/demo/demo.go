package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/buildinfo"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/httpserve"
	"github.com/bloomgate/bloomgate/internal/loadgen"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/repartition"
	"github.com/bloomgate/bloomgate/internal/worker"
)

const (
	devGroup = "bloomgate-dev"

	devCheckpointInterval = 10 * time.Second
	// devCatchUp bounds the wait, after an interrupt, for the worker to
	// consume what the producer wrote before it stopped.
	devCatchUp = 5 * time.Second
	// devReadyLimit bounds the wait for the worker to join and restore
	// before the producer starts.
	devReadyLimit = 60 * time.Second
)

// devScenario is what a demo produces and how the worker is set up for it.
type devScenario struct {
	name                                  string
	input, output, duplicates, deadLetter string
	key, normalize                        string
	// repartition: the input is keyed by something else than the dedup
	// key, and the worker runs the --repartition hop.
	repartition bool
	keyNoun     string // what a unique key is, for the summary
	events      int    // default --events
}

var devScenarios = []devScenario{
	{
		name: "orders", input: "orders", output: "orders-unique", duplicates: "orders-duplicates", deadLetter: "orders-dead-letter",
		key: "json:order_id", normalize: "none", keyNoun: "order_ids", events: 1_000_000,
	},
	{
		name: "crawler", input: "links", output: "frontier", duplicates: "links-duplicates", deadLetter: "links-dead-letter",
		key: "json:url", normalize: "url", repartition: true, keyNoun: "canonical URLs", events: 200_000,
	},
}

func scenarioNamed(name string) (devScenario, bool) {
	for _, s := range devScenarios {
		if s.name == name {
			return s, true
		}
	}
	return devScenario{}, false
}

// Options are the demo's settings (Flags).
type Options struct {
	fs            *flag.FlagSet // the flags, for which were set
	scenario      string
	events        int
	duplicates    float64
	rate          int
	partitions    int
	fetchers      int
	checkpointURL string
	metricsAddr   string
	brokerAddr    string
	keepRunning   bool
	batchSize     int
	batchTimeout  time.Duration
	drainTimeout  time.Duration
	logLevel      string
	progressEvery time.Duration
	exact         bool
	exactDir      string
}

// Flags defines the demo's flags on fs and returns the options they set;
// after fs is parsed, call Options.Resolve.
func Flags(fs *flag.FlagSet) *Options {
	def := config.Default()
	o := &Options{fs: fs}
	fs.StringVar(&o.scenario, "scenario", "orders", "orders (order events keyed by order_id) or crawler (links from several fetchers keyed by source host, deduplicated by canonical URL through the --repartition hop)")
	config.CountVar(fs, &o.events, "events", 1_000_000, "events the demo producer writes, a `count` (e.g. 1M; crawler: 200k unless set)")
	config.RateVar(fs, &o.duplicates, "duplicates", 0.2, "share of events that repeat an earlier key, a `rate` in [0,1) (0.2 or 20%)")
	config.CountVar(fs, &o.rate, "rate", 0, "events per second the producer writes, a `count` (0: as fast as possible)")
	config.CountVar(fs, &o.partitions, "partitions", 8, "partitions of every demo topic, a `count`")
	config.CountVar(fs, &o.fetchers, "fetchers", 4, "crawler: simulated fetchers writing links, a `count`")
	fs.StringVar(&o.checkpointURL, "checkpoint-url", def.CheckpointURL, "where checkpoints go; each run writes below its own run-… subdirectory/prefix")
	fs.StringVar(&o.metricsAddr, "metrics-addr", def.MetricsAddr, "listen address for /metrics, /healthz, /readyz, /status.json (if busy, a free port is used and printed; empty: off)")
	fs.StringVar(&o.brokerAddr, "broker-listen", "127.0.0.1:0", "listen address of the embedded broker (port 0: any free port)")
	fs.BoolVar(&o.keepRunning, "keep-running", false, "after the summary keep broker and worker running (Ctrl-C stops) so you can try kcat or produce more")
	config.CountVar(fs, &o.batchSize, "batch-size", def.BatchSize, "worker: max records per read/produce batch, a `count`")
	config.DurationVar(fs, &o.batchTimeout, "batch-timeout", def.BatchTimeout, "worker: max wait to fill a batch, a `duration`")
	config.DurationVar(fs, &o.drainTimeout, "drain-timeout", time.Minute, "after the producer finished, wait at most this `duration` without progress for the worker to consume everything")
	fs.StringVar(&o.logLevel, "log-level", "warn", "worker and broker log level on stderr: debug, info, warn, error")
	fs.BoolVar(&o.exact, "exact", false, "exact mode (as bloomgate run --exact): every positive of the filter is confirmed in a local store of key hashes; the summary counts the false positives it refuted")
	fs.StringVar(&o.exactDir, "exact-dir", def.ExactDir, "with --exact: where the stores go; each run writes below its own run-… subdirectory")
	return o
}

// Usage is the help text before the flags of `bloomgate dev`.
const Usage = `Usage: bloomgate dev [flags]

The embedded default: one process runs a Kafka-protocol broker on 127.0.0.1,
the dedup worker and a producer of events with a known share of duplicates.
Progress is shown every second; at the end a summary compares what the
worker forwarded with the producer's ground truth.

Scenarios:
  orders   order events keyed by order_id (key json:order_id). Topics: orders
           (input), orders-unique (output), orders-duplicates,
           orders-dead-letter.
  crawler  links found by several fetchers, keyed by the host of the page
           they were found on, so copies of a URL land in different
           partitions. The worker runs with --repartition --normalize url
           --key json:url: a first hop re-keys every link by the hash of its
           canonical URL into bloomgate-dev-repartition, the dedup stage
           reads that. Topics: links (input), frontier (output),
           links-duplicates, links-dead-letter. The summary reads the
           frontier back and counts how often each canonical URL was
           forwarded.

Every topic has --partitions partitions. Each run starts from fresh state:
its broker lives in memory and its checkpoints go to a new run-<time>
subdirectory of --checkpoint-url (older runs are left in place; "make clean"
removes ./.bloomgate). With --exact the worker runs in exact mode, its
stores in a run-<time> subdirectory of --exact-dir, and the summary counts
the filter's positives that the store refuted (false positives forwarded
instead of dropped).

Flags:
`

// Resolve applies the defaults that depend on other flags (a scenario's
// own --events unless set) and checks the options; an error is a usage
// error (UsageError).
func (o *Options) Resolve() error {
	set := map[string]bool{}
	if o.fs != nil {
		o.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}
	if sc, ok := scenarioNamed(o.scenario); ok && !set["events"] {
		o.events = sc.events
	}
	o.progressEvery = time.Second
	if err := o.validate(); err != nil {
		return UsageError{err}
	}
	return nil
}

func (o *Options) validate() error {
	var errs []error
	if _, ok := scenarioNamed(o.scenario); !ok {
		errs = append(errs, fmt.Errorf("--scenario %q: use orders or crawler", o.scenario))
	}
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
	if o.fetchers < 1 || o.fetchers > 100 {
		errs = append(errs, fmt.Errorf("--fetchers %d: want 1..100", o.fetchers))
	}
	if o.drainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %v: want > 0", o.drainTimeout))
	}
	return errors.Join(errs...)
}

// UsageError is a demo setting that cannot work: the command exits as for
// a bad flag.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Wiring is what the demo takes from the command that runs it: the
// worker, the hop and the status page are built as `bloomgate run` builds
// them.
type Wiring struct {
	NewWorker      func(context.Context, *config.Run, *slog.Logger, prometheus.Registerer) (*worker.Worker, *checkpoint.Store, *memory.Store, error)
	NewRepartition func(context.Context, *config.Run, *slog.Logger, prometheus.Registerer) (*repartition.Repartitioner, error)
	CloseState     func(*memory.Store, *slog.Logger)
	StatusHandler  func(*worker.Worker, prometheus.Gatherer) http.Handler
}

// Run builds broker, worker (and, for the crawler, the repartition hop),
// producer, progress monitor and status server, and runs them as one
// run.Group. The group's interrupts run in the order the actors are added,
// and each stage's interrupt waits until it has stopped, so shutdown is
// ordered: the producer stops, the monitor lets the worker catch up, then
// the hop, the worker (flush, commit, final checkpoints), the status server
// and last the broker they all talk to.
func Run(ctx context.Context, o *Options, wire Wiring, stdout, stderr io.Writer) error {
	sc, _ := scenarioNamed(o.scenario)
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return UsageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", o.logLevel)}
	}
	tty := isTerminal(stderr)
	// Log lines must not land in the middle of a progress line.
	lw := &lineWriter{w: stderr, tty: tty}
	logger := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: lvl}))

	runID := "run-" + time.Now().UTC().Format("20060102T150405Z")
	cpURL, err := devCheckpointURL(o.checkpointURL, runID)
	if err != nil {
		return UsageError{fmt.Errorf("--checkpoint-url: %w", err)}
	}

	var topics []broker.TopicSpec
	for _, t := range []string{sc.input, sc.output, sc.duplicates, sc.deadLetter} {
		topics = append(topics, broker.TopicSpec{Name: t, Partitions: o.partitions})
	}
	b, err := broker.New(broker.Config{Listen: o.brokerAddr, Topics: topics, Logger: logger.With("component", "broker")})
	if err != nil {
		return UsageError{fmt.Errorf("--broker-listen: %w", err)}
	}
	defer b.Close()

	gen := loadgen.GenConfig{Count: o.events, Duplicates: o.duplicates, Seed: uint64(time.Now().UnixNano())}
	unique, err := uniqueKeys(gen)
	if err != nil {
		return UsageError{err}
	}
	cfg := devConfig(sc, o, b.Addr(), cpURL)
	if o.exact {
		cfg.Exact = true
		if cfg.ExactDir, err = filepath.Abs(filepath.Join(o.exactDir, runID)); err != nil {
			return UsageError{fmt.Errorf("--exact-dir: %w", err)}
		}
	}
	plan := planCapacity(unique, o.partitions, cfg.Generations)
	cfg.Capacity = plan.capacity
	if err := cfg.Validate(); err != nil {
		return UsageError{err}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), buildinfo.Collector())
	var hop *repartition.Repartitioner
	if cfg.Repartition {
		if hop, err = wire.NewRepartition(ctx, &cfg, logger, reg); err != nil {
			return err
		}
	}
	w, store, state, err := wire.NewWorker(ctx, &cfg, logger, reg)
	if err != nil {
		return err
	}
	defer store.Close()
	defer wire.CloseState(state, logger)

	d := &demo{
		ctx: ctx, sc: sc, opts: *o, cfg: &cfg, plan: plan, w: w, store: store, brokerAddr: b.Addr(), reg: reg,
		stdout: stdout, stderr: stderr, tty: tty, lw: lw, cpURL: checkpoint.RedactURL(cpURL), prog: commandName(),
	}
	var (
		srv *httpserve.Server
		ln  net.Listener
	)
	if o.metricsAddr != "" {
		var note string
		if ln, note, err = listenWithFallback(o.metricsAddr); err != nil {
			return UsageError{fmt.Errorf("--metrics-addr %s: %w", o.metricsAddr, err)}
		}
		defer ln.Close() // Serve closes it too; this covers returns before the group runs
		d.metricsAddr = ln.Addr().String()
		if note != "" {
			fmt.Fprintln(stderr, note)
		}
		srv = httpserve.New(ln, wire.StatusHandler(w, reg), httpserve.Limits{})
	}
	writeDevHeader(stderr, d)

	var g oklog.Group
	g.Add(oklog.ContextHandler(ctx)) // Ctrl-C, SIGTERM
	g.Add(d.producer(gen))
	g.Add(d.monitor())
	if hop != nil {
		addStage(&g, "repartition hop", hop.Run, nil)
	}
	d.worker = addStage(&g, "worker", func(ctx context.Context) error { return w.Run(ctx) }, d.workerStopping)
	if srv != nil {
		sctx, stopServer := context.WithCancel(context.Background())
		g.Add(func() error {
			if err := srv.Run(sctx); err != nil {
				return fmt.Errorf("status server: %w", err)
			}
			return nil
		}, func(error) { stopServer() })
	}
	bctx, stopBroker := context.WithCancel(context.Background())
	g.Add(func() error { return b.Run(bctx) }, func(error) { stopBroker() })
	return d.finish(g.Run())
}

// devConfig is the worker's configuration for a scenario; the capacity is
// set from the plan.
func devConfig(sc devScenario, o *Options, brokerAddr, cpURL string) config.Run {
	cfg := config.Default()
	cfg.Brokers = []string{brokerAddr}
	cfg.Group = devGroup
	cfg.Input, cfg.Output, cfg.Duplicates, cfg.DeadLetter = sc.input, sc.output, sc.duplicates, sc.deadLetter
	cfg.Key, cfg.Normalize, cfg.Repartition = sc.key, sc.normalize, sc.repartition
	cfg.OnMissingKey = config.OnMissingDeadLetter
	cfg.CheckpointURL = cpURL
	cfg.CheckpointInterval = devCheckpointInterval
	cfg.MaxCheckpointStaleness = 10 * cfg.CheckpointInterval
	cfg.BatchSize = o.batchSize
	cfg.BatchTimeout = o.batchTimeout
	cfg.MetricsAddr = "" // the demo serves it, with a fallback port
	cfg.LogLevel = o.logLevel
	return cfg
}

// capacityPlan sizes the demo's filter for its own keys. Capacity counts
// distinct keys per window, and a generation plans for Capacity/(G−1) of
// them (a window spans G−1 generations). The demo writes all its keys
// within seconds, into one generation, so that generation must hold them
// all: G−1 times the unique keys, with headroom for the uneven spread over
// partitions (four standard deviations of a partition's share). Planned for
// the window instead, the generation would stack overflow sub-filters.
type capacityPlan struct {
	unique      int
	generations int
	perGen      uint64 // planned keys per partition and generation
	capacity    uint64 // --capacity: keys per window, whole topic
}

func planCapacity(unique, partitions, generations int) capacityPlan {
	m := float64(unique) / float64(partitions)
	perGen := uint64(math.Ceil(m + 4*math.Sqrt(m) + 16))
	return capacityPlan{
		unique:      unique,
		generations: generations,
		perGen:      perGen,
		capacity:    perGen * uint64(generations-1) * uint64(partitions),
	}
}

// uniqueKeys is the number of distinct keys the producer will write.
func uniqueKeys(gen loadgen.GenConfig) (int, error) {
	g, err := loadgen.NewGenerator(gen)
	if err != nil {
		return 0, err
	}
	return g.Unique(), nil
}

// stage is a component run by the group until its interrupt.
type stage struct {
	done chan struct{}
	err  error // valid once done is closed
}

// addStage adds a component with a blocking fn(ctx) to g. Its interrupt
// cancels ctx and waits until fn has returned (calling whileStopping
// meanwhile, if set): run.Group calls interrupts in the order the actors
// were added, so stages stop one after the other in that order.
func addStage(g *oklog.Group, name string, fn func(context.Context) error, whileStopping func(done <-chan struct{})) *stage {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stage{done: make(chan struct{})}
	g.Add(func() error {
		defer close(s.done)
		err := fn(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("stopped by itself")
		}
		if err != nil {
			s.err = fmt.Errorf("%s: %w", name, err)
		}
		return s.err
	}, func(error) {
		cancel()
		if whileStopping != nil {
			whileStopping(s.done)
		}
		<-s.done
	})
	return s
}

// waitReady waits until the worker has joined the group and restored every
// assigned partition.
func waitReady(ctx context.Context, w workerStatus, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s := w.Status(); s.Ready && len(s.Assigned) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("worker not ready after %s (joining the group, restoring partitions)", limit)
		case <-t.C:
		}
	}
}

// workerStatus is what the demo reads of the worker.
type workerStatus interface{ Status() worker.Status }

// devCheckpointURL puts the run's checkpoints below runID, so that every
// run starts with empty filters: the demo broker is in memory, a new run's
// topics start at offset 0 and must not meet the previous run's state.
func devCheckpointURL(raw, runID string) (string, error) {
	raw = config.AbsFileURLArg(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New(checkpoint.UnparsableURL) // url.Error repeats the URL
	}
	switch u.Scheme {
	case "file", "s3", "mem":
	default:
		return "", fmt.Errorf("%s: use file:///dir, s3://bucket/prefix or mem://name", checkpoint.RedactURL(raw))
	}
	if u.Scheme == "file" {
		// Owner only, as the checkpoint store creates them: manifests hold
		// the memory's secret hash seed.
		if err := os.MkdirAll(u.Path, 0o700); err != nil {
			return "", err
		}
		// Two runs started within the same second get distinct directories.
		base := runID
		for i := 2; ; i++ {
			err := os.Mkdir(filepath.Join(u.Path, runID), 0o700)
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
		return "", fmt.Errorf("%s: missing bucket or name", checkpoint.RedactURL(raw))
	}
	return u.String(), nil
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
