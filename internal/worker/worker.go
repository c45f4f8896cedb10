package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/leaders"
	"github.com/bloomgate/bloomgate/internal/producer"
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
	// filter (that runs on event time), nor by the group member and the
	// committer (their checks pace with their own tickers). Default
	// time.Now. Timers are the time package's: a test that needs both
	// virtual runs in a synctest bubble (docs/development.md, "Time").
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
	leaders    *leaders.Refresher
	out        *output
	client     *kafka.Client
	limits     *outputLimits

	// The stall watchdog's threshold and round (StallAfter and
	// stallWatchEvery), and the retry of a record a partition stalls
	// before (UnwritableRetry); tests shorten them.
	stallAfter, stallWatchEvery, unwritableRetry time.Duration
	// check explains failures to reach the brokers (brokercheck), and
	// access applies the runtime rule for refused access (access.go).
	check  *brokercheck.Client
	access *brokercheck.Watch
	// accessGiveUp is the runtime rule's bound (0: its default); tests
	// shorten it.
	accessGiveUp time.Duration
	// seedPartitions is the partition count of Config.SeedTopic, read
	// with the other topics at start.
	seedPartitions int
	seedErr        error

	// count totals the records of every partition since start (the
	// periodic progress line).
	count struct {
		consumed, forwarded, duplicates, deadLettered, dropped, replayed atomic.Uint64
	}

	mu     sync.Mutex
	status Status
	parts  map[int]*partitionStatus
	// unjoinedSince is when the worker last left (or, at start, had not
	// yet entered) a generation; zero while in one.
	unjoinedSince time.Time
	// assignedAt is when the assignment last gained a partition: where
	// catching up with the input begins (catchup.go).
	assignedAt time.Time
	// assignedTotals are the record counts at assignedAt.
	assignedTotals totals
	// plannedPerPartition is one partition's planned filter memory (0:
	// the StateStore plans none).
	plannedPerPartition uint64

	// hooks are the tests' levers (Deps.Hooks); never nil.
	hooks *Hooks
	// stopping is set when Run shuts down: partitions ending now have
	// ShutdownTimeout for the final commit and checkpoint, a revoke only
	// half the session timeout.
	stopping atomic.Bool
	// reported holds the foreign-record reports already logged
	// (reportForeign).
	reported sync.Map
	// member is the worker's membership of the consumer group; ms runs
	// its partitions (membership.go).
	member *group.Member
	ms     *membership
	// joinLog thins the lines of joins failing in a row; entering a
	// generation ends the run (setJoined).
	joinLog group.RetryLog
	// discards reports partitions started empty by --on-restore-failure
	// empty (discards.go).
	discards discardLog
	// xpart notices keys met in two partitions: an input not keyed by
	// the dedup key (crosspartition.go).
	xpart *crossPartition
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
	// TextHeaders, once set, makes written records carry format 1's
	// headers (bloomgate-src-partition, bloomgate-src-offset and
	// bloomgate-provenance), as builds before format 2 wrote them.
	TextHeaders atomic.Bool
}

// errWorkerStopped marks errors that end Run (an error that says itself
// what stopped the worker and what to do is marked with errmark.Mark
// rather than prefixed).
var errWorkerStopped = errors.New("worker stopped")

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
	w := &Worker{
		cfg: cfg, deps: deps, m: m, hooks: hooks, xpart: newCrossPartition(),
		log:   deps.Logger.With("group", cfg.Group, "input", cfg.Input),
		parts: map[int]*partitionStatus{},

		stallAfter: StallAfter, stallWatchEvery: stallWatchEvery, unwritableRetry: UnwritableRetry,
	}
	w.joinLog = group.RetryLog{Log: w.log, What: "joining the consumer group", Now: w.deps.Now}
	return w, nil
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
	w.check = w.brokerCheck()
	w.access = &brokercheck.Watch{Client: w.check, Log: w.log, Now: w.deps.Now, GiveUp: w.accessGiveUp}
	if err := w.checkTopics(ctx); err != nil {
		return err
	}
	if err := w.checkSeedTopic(ctx); err != nil {
		return err
	}
	w.limits = w.startLimits(ctx)
	w.leaders = leaders.New(w.cfg.Transport, w.cfg.Brokers)
	prod, err := producer.New(producer.Config{Transport: w.cfg.Transport, Brokers: w.cfg.Brokers, Leaders: w.leaders,
		Timeout: w.cfg.WriteTimeout, OnRetry: w.writeRetried})
	if err != nil {
		return err
	}
	w.out = newOutput(w.cfg, prod, w.partitions, w.limits.bound)
	for _, t := range w.writtenTopics() {
		for _, r := range writeRetryReasons {
			w.m.writeRetries.WithLabelValues(t, r)
		}
	}
	// A partition's series start at 0 when this worker takes it, and its
	// gauges are deleted when it gives it up (metrics.forgetPartition):
	// the sum over the group's workers counts each partition once, and a
	// partition no worker processes shows in
	// bloomgate_group_unprocessed_partitions instead of as a frozen lag.
	for _, r := range resetReasons {
		w.m.inputResets.WithLabelValues(w.cfg.Input, r)
	}
	w.m.inputLost.WithLabelValues(w.cfg.Input)
	w.m.restoresDiscarded.WithLabelValues(w.cfg.Input)
	w.m.unprocessedPartitions.WithLabelValues(w.cfg.Input)
	w.m.unprocessedLag.WithLabelValues(w.cfg.Input)
	w.m.crossRepeats.WithLabelValues(w.cfg.Input)
	if err := w.checkMemory(ctx); err != nil {
		return err
	}
	for _, t := range []string{w.cfg.Output, w.cfg.Duplicates, w.cfg.DeadLetter} {
		if t != "" {
			for _, r := range ForeignReasons() {
				w.m.foreign.WithLabelValues(t, r)
			}
		}
	}

	member, err := w.newMember()
	if err != nil {
		return err
	}
	w.member = member
	// The partitions' contexts end only through the membership (revoke,
	// loss, fence), so that a shutdown goes through a revoke too.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopParts()
	com := group.NewCommitter(member, w.cfg.Input, w.cfg.CommitInterval, w.log, w.m.commitFailures, nil)
	ms := newMembership(w, ctx, partsCtx, member, com)
	com.Fence = ms.Fence
	com.Halted = w.hooks.Halted.Load
	com.MaxGap = w.cfg.sessionTimeout()
	com.Denied = w.accessFailed
	w.ms = ms
	w.setJoined(false)
	w.logStart()
	return w.ended(parent, ctx, w.serve(ctx, cancel, member, ms, com))
}

// ended is Run's result once the membership ended with runErr and every
// goroutine of serve has returned: a fenced member idles until ctx ends
// (idleFenced), an error ends the worker.
func (w *Worker) ended(parent, ctx context.Context, runErr error) error {
	if runErr != nil && errors.Is(runErr, kafka.FencedInstanceID) && ctx.Err() == nil {
		w.idleFenced(ctx, runErr)
		runErr = nil
	}
	if runErr != nil {
		if e := w.check.Explain(runErr); e != nil {
			e.Attempts = 1
			runErr = e
		}
		w.stop(runErr)
	}
	// ctx has ended on every way here: the agreement checks return.
	w.ms.checks.Wait()
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

// serve runs the membership, the watchers of the group and the partitions,
// and the committer as one run.Group until the membership ends, and
// returns its error. Every goroutine it starts has returned when it
// returns, also when the shutdown overran its timeout (runMember): the
// interrupts run in order, so the committer closes only after the member
// and its partitions have stopped. cancel ends ctx.
func (w *Worker) serve(ctx context.Context, cancel context.CancelCauseFunc, member *group.Member, ms *membership, com *group.Committer) error {
	var g oklog.Group
	var runErr error
	memberDone := make(chan struct{})
	g.Add(func() error {
		defer close(memberDone)
		runErr = w.runMember(ctx, member, ms)
		return runErr
	}, func(error) {
		select {
		case <-memberDone: // it ended the group; a fenced member idles on ctx (Run)
		default:
			cancel(nil)
			<-memberDone
		}
	})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for _, watch := range []func(context.Context){
		func(ctx context.Context) { w.watchGroup(ctx, func() { member.RequestRejoin(true) }) },
		func(ctx context.Context) { w.logProgress(ctx, workerProgress) },
		w.watchPartitions,
	} {
		g.Add(func() error { watch(watchCtx); return nil }, func(error) { stopWatch() })
	}
	g.Add(func() error { com.Run(); return nil }, func(error) {
		w.stopping.Store(true)
		com.Close()
	})
	_ = g.Run() // the watchers end with ctx, before the member: its error is runErr
	return runErr
}

// runMember runs the membership until it ends by itself or ctx ends. Once
// ctx has ended the member revokes its partitions (their final commits and
// checkpoints) and leaves the group, within cfg.ShutdownTimeout; past it
// (and a margin) it says so, and still waits for the member: a partition
// left running would commit through a closed committer.
func (w *Worker) runMember(ctx context.Context, member *group.Member, ms *membership) error {
	ran := make(chan error, 1)
	go func() { ran <- member.Run(ctx, ms) }()
	select {
	case err := <-ran:
		return err
	case <-ctx.Done():
	}
	w.log.Info("worker stopping", "shutdown_timeout", w.cfg.ShutdownTimeout)
	select {
	case err := <-ran:
		return err
	case <-time.After(w.cfg.ShutdownTimeout + 5*time.Second):
	}
	w.log.Error("shutdown did not finish in time; waiting for the partitions still stopping", "shutdown_timeout", w.cfg.ShutdownTimeout,
		"partitions", ms.Owned())
	return <-ran
}

// idleFenced holds a member whose static instance id another member took
// until ctx ends: it does not rejoin, and it does not exit. Rejoining, or
// exiting into a supervisor's restart, would fence the other member in
// turn, and two workers given one --group-instance-id would take turns
// forever; idle, the other one keeps the partitions and this one says why
// it does nothing (ERROR, /readyz, the status page) while /healthz stays
// 200, so that nothing restarts it.
func (w *Worker) idleFenced(ctx context.Context, err error) {
	w.setJoined(false)
	w.mu.Lock()
	w.status.Fenced = err.Error()
	w.mu.Unlock()
	w.log.Error("fenced: another member joined with this worker's --group-instance-id; staying idle without "+
		"rejoining (rejoining or restarting would fence the other in turn) until stopped", "err", err,
		"group_instance_id", w.cfg.InstanceID)
	<-ctx.Done()
}

// stop ends Run with err.
func (w *Worker) stop(err error) {
	w.fatal.CompareAndSwap(nil, &err)
	w.fail(err)
}

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
	if w.cfg.SeedTopic != "" {
		names = append(names, w.cfg.SeedTopic)
	}
	md, err := w.readMetadata(ctx, names)
	if err != nil {
		return err
	}
	if e := w.check.CheckTopics(md); e != nil {
		e.Attempts = 1
		return e
	}
	w.partitions = map[string]int{}
	topicErr := map[string]error{}
	for _, t := range md {
		if t.Name == w.cfg.SeedTopic {
			w.seedPartitions, w.seedErr = t.Partitions, t.Err
		}
		if t.Err != nil {
			topicErr[t.Name] = t.Err
			continue
		}
		w.partitions[t.Name] = t.Partitions
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
		hint = fmt.Sprintf(", e.g. kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions %d "+
			"(the embedded `bloomgate broker`: --topic %s:%d at its start; kcat cannot create topics)",
			w.cfg.Brokers[0], name, inputPartitions, name, inputPartitions)
	}
	return fmt.Sprintf("--%s topic %q does not exist: create it with %s%s%s, or fix --%s", flag, name, count, why, hint, flag)
}

// readMetadata asks the brokers about the topics, with their ACLs. A
// broker that is restarting is not a configuration error: connection
// failures are retried for brokercheck.StartupBound before giving up with
// an error that names --brokers and what was tried; refused logins, ACLs
// and TLS mismatches end it at once (brokercheck.Client.Retry). A topic
// whose leader is not yet elected (just created) is retried too.
func (w *Worker) readMetadata(ctx context.Context, names []string) ([]brokercheck.Topic, error) {
	var topics []brokercheck.Topic
	err := w.check.Retry(ctx, w.log, func(ctx context.Context) error {
		var err error
		if topics, err = w.check.Topics(ctx, names); err != nil {
			return err
		}
		for _, t := range topics {
			if errors.Is(t.Err, kafka.LeaderNotAvailable) {
				return fmt.Errorf("topic %q: %w", t.Name, t.Err)
			}
		}
		return nil
	})
	return topics, err
}
