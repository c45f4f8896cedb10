package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Deps are the collaborators of a Worker.
type Deps struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	State      StateStore
	Extractor  Extractor
	// SeedExtractor derives keys from the records of Config.SeedTopic
	// (nil: Extractor), for a seed topic whose records carry the key
	// elsewhere than the input's.
	SeedExtractor Extractor
	// Hooks are for tests (see Hooks); nil in production.
	Hooks *Hooks
	// Now schedules checkpoints and measures durations; never used for the
	// filter (that runs on event time). Default time.Now.
	Now func() time.Time
}

// Worker is one member of the consumer group.
type Worker struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	m    *metrics

	running atomic.Bool
	fail    context.CancelCauseFunc
	fatal   atomic.Pointer[error]

	// Set once Run has looked at the topics.
	params     FilterParams
	partitions map[string]int // partition count per topic
	out        *output
	client     *kafka.Client
	limits     *outputLimits

	// The stall watchdog's threshold and round (StallAfter and
	// stallWatchEvery), and the retry of a record a partition stalls
	// before (UnwritableRetry); tests shorten them.
	stallAfter, stallWatchEvery, unwritableRetry time.Duration

	// count totals the records of every partition since start (the
	// periodic progress line).
	count struct {
		consumed, forwarded, duplicates, deadLettered, dropped atomic.Uint64
	}

	mu     sync.Mutex
	status Status
	parts  map[int]*partitionStatus
	// unjoinedSince is when the worker last left (or, at start, had not
	// yet entered) a generation; zero while in one.
	unjoinedSince time.Time

	// hooks are the tests' levers (Deps.Hooks); never nil.
	hooks *Hooks
	// stopping is set when Run shuts down: partitions ending now have
	// ShutdownTimeout for the final commit and checkpoint, a revoke only
	// half the session timeout.
	stopping atomic.Bool
	// reported holds the foreign-record reports already logged
	// (reportForeign).
	reported sync.Map
}

// Hooks let tests stage failures that a process cannot stage from outside
// (within one process, without killing it). Production leaves Deps.Hooks
// nil.
type Hooks struct {
	// Halted simulates kill -9: once set, partitions stop without a final
	// commit or checkpoint, and nothing more is committed.
	Halted atomic.Bool
	// AfterWrite, if set, runs on the partition's goroutine after each
	// acknowledged output write, and after each replayed batch.
	AfterWrite func(partition int, next int64)
	// LoseAck, if set and true, turns a successful output write into a
	// failure, as if the acknowledgement was lost.
	LoseAck func(partition int) bool
	// LegacyHeaders, once set, makes written records carry no provenance
	// header, as a build from before provenance wrote them.
	LegacyHeaders atomic.Bool
}

// errFatal marks errors that end Run.
var errFatal = errors.New("worker stopped")

// New checks cfg and deps; it starts nothing.
func New(cfg Config, deps Deps) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid worker config: %w", err)
	}
	cfg = cfg.WithDefaults()
	if deps.State == nil {
		return nil, errors.New("worker deps: State is required")
	}
	if deps.Extractor == nil {
		return nil, errors.New("worker deps: Extractor is required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Registerer == nil {
		deps.Registerer = prometheus.NewRegistry()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	hooks := deps.Hooks
	if hooks == nil {
		hooks = &Hooks{}
	}
	return &Worker{
		cfg: cfg, deps: deps, m: m, hooks: hooks,
		log:   deps.Logger.With("group", cfg.Group, "input", cfg.Input),
		parts: map[int]*partitionStatus{},

		stallAfter: StallAfter, stallWatchEvery: stallWatchEvery, unwritableRetry: UnwritableRetry,
	}, nil
}

// Run joins the group and processes assigned partitions until ctx ends, then
// shuts down in order: stop fetching, flush output, commit, checkpoint,
// leave the group, within cfg.ShutdownTimeout. It returns nil after a
// shutdown caused by ctx, and an error if the worker could not start or had
// to stop (bad topics, on-missing-key=fail, unusable checkpoint with
// on-restore-failure=fail).
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.fail = cancel

	w.client = &kafka.Client{Addr: kafka.TCP(w.cfg.Brokers...), Transport: w.cfg.Transport, Timeout: 30 * time.Second}
	if err := w.checkTopics(ctx); err != nil {
		return err
	}
	if err := w.checkSeedTopic(ctx); err != nil {
		return err
	}
	w.limits = w.startLimits(ctx)
	w.out = newOutput(w.cfg)
	w.out.w.BatchBytes = w.limits.writerBytes
	w.out.w.ErrorLogger = kafka.LoggerFunc(func(msg string, a ...any) { w.log.Debug("kafka writer: " + fmt.Sprintf(msg, a...)) })
	defer w.out.w.Close()
	for p := 0; p < w.partitions[w.cfg.Input]; p++ {
		w.m.partition(w.cfg.Input, p) // series start at 0
	}
	for _, r := range resetReasons {
		w.m.inputResets.WithLabelValues(w.cfg.Input, r)
	}
	w.m.inputLost.WithLabelValues(w.cfg.Input)
	for _, t := range []string{w.cfg.Output, w.cfg.Duplicates, w.cfg.DeadLetter} {
		if t != "" {
			for _, r := range ForeignReasons() {
				w.m.foreign.WithLabelValues(t, r)
			}
		}
	}

	newGroup := func() (*kafka.ConsumerGroup, error) {
		return kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID:                w.cfg.Group,
			Brokers:           w.cfg.Brokers,
			Dialer:            w.cfg.Dialer,
			Topics:            []string{w.cfg.Input},
			HeartbeatInterval: w.cfg.HeartbeatInterval,
			SessionTimeout:    w.cfg.SessionTimeout,
			RebalanceTimeout:  w.cfg.RebalanceTimeout,
			JoinGroupBackoff:  w.cfg.JoinGroupBackoff,
			// kafka-go's default balancers, in its order.
			GroupBalancers: []kafka.GroupBalancer{
				leaderBalancer{kafka.RangeGroupBalancer{}, w}, leaderBalancer{kafka.RoundRobinGroupBalancer{}, w},
			},
			// See liveness.go: the join deadline must outlast the
			// coordinator's rebalance, or a timed-out join restarts it.
			Timeout:     w.cfg.coordinatorTimeout(),
			StartOffset: kafka.FirstOffset,
			ErrorLogger: kafka.LoggerFunc(func(msg string, a ...any) { w.log.Debug("kafka group: " + fmt.Sprintf(msg, a...)) }),
		})
	}
	cg, err := newGroup()
	if err != nil {
		return fmt.Errorf("creating consumer group: %w", err)
	}
	w.setJoined(false)
	// Groups dropped by a rebuild close in the background (a pending
	// JoinGroup ends at its deadline); Run waits for them before it returns.
	var closing sync.WaitGroup
	var rebuild atomic.Pointer[context.CancelFunc]
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.watchGroup(watchCtx, func() {
			if f := rebuild.Load(); f != nil {
				(*f)()
			}
		})
	}()
	w.logStart()
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); w.logProgress(watchCtx, workerProgressInterval) }()
	stallsDone := make(chan struct{})
	go func() { defer close(stallsDone); w.watchPartitions(watchCtx) }()
	for {
		nctx, ncancel := context.WithCancel(ctx)
		rebuild.Store(&ncancel)
		gen, err := cg.Next(nctx)
		// Read before ncancel: only the watchdog's cancel means a rebuild.
		asked := nctx.Err() != nil
		ncancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				break
			}
			if asked {
				// The watchdog asked for a fresh membership.
				old := cg
				closing.Add(1)
				go func() { defer closing.Done(); _ = old.Close() }()
				if cg, err = newGroup(); err != nil {
					w.stop(fmt.Errorf("creating consumer group: %w", err))
					break
				}
				continue
			}
			// Rebalance in progress, coordinator moved, broker restarting:
			// kafka-go rejoins by itself.
			w.log.Warn("consumer group generation failed; rejoining", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		w.startGeneration(gen)
	}
	stopWatch()
	<-watched
	<-progressDone
	<-stallsDone
	w.stopping.Store(true)

	w.log.Info("worker stopping", "shutdown_timeout", w.cfg.ShutdownTimeout)
	closed := make(chan struct{})
	go func() { _ = cg.Close(); closing.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(w.cfg.ShutdownTimeout + 5*time.Second):
		w.log.Error("shutdown did not finish in time; leaving", "shutdown_timeout", w.cfg.ShutdownTimeout)
	}
	w.setJoined(false)
	w.m.groupJoined.Set(0)
	if errp := w.fatal.Load(); errp != nil {
		return *errp
	}
	if parent.Err() == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// stop ends Run with err.
func (w *Worker) stop(err error) {
	w.fatal.CompareAndSwap(nil, &err)
	w.fail(err)
}

// startupRetry bounds how long Run waits for unreachable brokers at start.
const startupRetry = time.Minute

// checkTopics reads the partition counts and refuses what cannot work.
// ErrTopicConfig marks start-up errors caused by the topics themselves
// (missing, or partition counts that do not fit the partitioning or the
// filter plan): a configuration problem, not a runtime failure.
var ErrTopicConfig = errors.New("topic configuration")

func (w *Worker) checkTopics(ctx context.Context) error {
	type topic struct{ flag, name string }
	topics := []topic{{"input", w.cfg.Input}, {"output", w.cfg.Output}}
	for _, t := range []topic{{"duplicates", w.cfg.Duplicates}, {"dead-letter", w.cfg.DeadLetter}} {
		if t.name != "" {
			topics = append(topics, t)
		}
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.name
	}
	md, err := w.readMetadata(ctx, names)
	if err != nil {
		return err
	}
	w.partitions = map[string]int{}
	topicErr := map[string]error{}
	for _, t := range md.Topics {
		if t.Error != nil {
			topicErr[t.Name] = t.Error
			continue
		}
		w.partitions[t.Name] = len(t.Partitions)
	}
	in := w.partitions[w.cfg.Input]
	var problems []string // one log line: joined with "; "
	for _, t := range topics {
		terr := topicErr[t.name]
		switch {
		case terr == nil && w.partitions[t.name] > 0:
		case terr == nil, errors.Is(terr, kafka.UnknownTopicOrPartition):
			problems = append(problems, w.missingTopic(t.flag, t.name, in))
		default:
			problems = append(problems, fmt.Sprintf("--%s topic %q: %v", t.flag, t.name, terr))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrTopicConfig, strings.Join(problems, "; "))
	}
	out := w.partitions[w.cfg.Output]
	if w.cfg.Partitioning == PartitioningSame && in != out {
		return fmt.Errorf("%w: --partitioning same needs equal partition counts: --input %q has %d, --output %q has %d; "+
			"give the output %d partitions or set --partitioning hash", ErrTopicConfig, w.cfg.Input, in, w.cfg.Output, out, in)
	}
	w.params = w.cfg.partitionParams(in)
	if pl, ok := w.deps.State.(Planner); ok {
		if err := pl.CheckParams(w.params); err != nil {
			return fmt.Errorf("%w: --capacity %d over the %d partitions of %q is %d keys per window and partition: %w; "+
				"lower --capacity, raise --fpr or give the input more partitions",
				ErrTopicConfig, w.cfg.Filter.Capacity, in, w.cfg.Input, w.params.Capacity, err)
		}
	}
	return nil
}

// missingTopic says which flag names a topic that does not exist, and how
// to create it: with the input's partition count, which --partitioning
// same needs for the output and which suits the other written topics.
func (w *Worker) missingTopic(flag, name string, inputPartitions int) string {
	if flag == "input" {
		return fmt.Sprintf("--input topic %q does not exist: check the name (topics are case-sensitive) or create it", name)
	}
	count, why := "as many partitions as the input", ""
	if inputPartitions > 0 {
		count = fmt.Sprintf("%d partitions", inputPartitions)
		why = fmt.Sprintf(" (as many as --input %q has", w.cfg.Input)
		if flag == "output" && w.cfg.Partitioning == PartitioningSame {
			why += ", which --partitioning same needs"
		}
		why += ")"
	}
	hint := ""
	if inputPartitions > 0 && len(w.cfg.Brokers) > 0 {
		hint = fmt.Sprintf(", e.g. kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions %d",
			w.cfg.Brokers[0], name, inputPartitions)
	}
	return fmt.Sprintf("--%s topic %q does not exist: create it with %s%s%s, or fix --%s", flag, name, count, why, hint, flag)
}

// readMetadata asks the brokers about the topics. A broker that is
// restarting is not a configuration error: connection failures are
// retried for startupRetry before giving up with an error that names
// --brokers and what was tried.
func (w *Worker) readMetadata(ctx context.Context, names []string) (*kafka.MetadataResponse, error) {
	start := time.Now()
	deadline := start.Add(startupRetry)
	attempts := 0
	b := newBackoff(200*time.Millisecond, 5*time.Second)
	for {
		attempts++
		md, err := w.client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		if err == nil {
			return md, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading topic metadata from %v: %w", w.cfg.Brokers, err)
		}
		if cause := errors.Unwrap(err); cause != nil && strings.HasPrefix(err.Error(), "kafka.(*Client).Metadata: ") {
			err = cause // kafka-go's prefix says nothing to a user
		}
		if now := time.Now(); now.After(deadline) {
			return nil, brokersUnreachable(w.cfg.Brokers, attempts, now.Sub(start), err)
		}
		w.log.Warn("brokers unreachable; retrying until the start-up bound, then stopping",
			"brokers", w.cfg.Brokers, "err", err, "retry_in", min(b.delay(), time.Until(deadline)).Round(time.Millisecond),
			"start_up_bound", startupRetry, "gives_up_in", time.Until(deadline).Round(time.Second))
		b.wait(ctx, max(time.Until(deadline), 0)+time.Millisecond)
	}
}

// brokersUnreachable is the error after the start-up retries: what was
// tried, for how long, the last failure, and what to check.
func brokersUnreachable(brokers []string, attempts int, tried time.Duration, last error) error {
	check := "check the addresses and that this host can reach the brokers"
	var dnsErr *net.DNSError
	if errors.As(last, &dnsErr) && dnsErr.IsNotFound {
		check = fmt.Sprintf("check the host name %q, which does not resolve", dnsErr.Name)
	}
	return fmt.Errorf("--brokers %s: no broker answered in %d attempts over %s (the start-up bound is %s); last error: %w; %s",
		strings.Join(brokers, ","), attempts, tried.Round(time.Second), startupRetry, last, check)
}

// startGeneration runs one generation: a supervisor that owns the committer
// and one goroutine per assigned partition, all tied to the generation.
func (w *Worker) startGeneration(gen *kafka.Generation) {
	w.m.rebalances.Inc()
	assigned := append([]kafka.PartitionAssignment(nil), gen.Assignments[w.cfg.Input]...)
	sort.Slice(assigned, func(i, j int) bool { return assigned[i].ID < assigned[j].ID })
	ids := make([]int, len(assigned))
	for i, a := range assigned {
		ids[i] = a.ID
	}
	w.log.Info("joined generation", "generation", gen.ID, "member", gen.MemberID, "partitions", ids)
	w.setJoined(true)
	w.m.groupJoined.Set(1)
	w.m.groupUnjoined.Set(0)
	w.mu.Lock()
	w.status.Generation = gen.ID
	w.status.MemberID = gen.MemberID
	w.status.Assigned = ids
	w.mu.Unlock()

	if r, ok := w.deps.State.(Retainer); ok {
		r.Retain(w.cfg.Input, ids)
	}
	gen.Start(func(genCtx context.Context) {
		gctx, gcancel := context.WithCancelCause(genCtx)
		defer gcancel(nil)
		com := newCommitter(gen, w.cfg.Input, w.cfg.CommitInterval, w.log.With("generation", gen.ID), w.m, gcancel)
		com.halted = w.hooks.Halted.Load
		com.maxGap = w.cfg.sessionTimeout()
		go com.run()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); w.checkAgreement(gctx, gen.MemberID) }()
		for _, a := range assigned {
			wg.Add(1)
			gen.Start(func(context.Context) {
				defer wg.Done()
				w.runPartition(gctx, gen.ID, com, a)
			})
		}
		// With nothing assigned, returning would end the generation.
		<-gctx.Done()
		wg.Wait()
		com.close()
		w.mu.Lock()
		current := w.status.Generation == gen.ID
		if current {
			w.status.Assigned = nil
		}
		w.mu.Unlock()
		if current {
			w.setJoined(false)
		}
	})
}
