package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// offsetCommitter commits offsets for the current generation of the
// group member (Member.CommitOffsets; a fake in tests).
type offsetCommitter interface {
	CommitOffsets(offsets map[string]map[int]int64) error
}

// Committer is the worker's only caller of OffsetCommit. Partitions hand
// it offsets whose output writes are acknowledged; it commits them every
// interval, and at once when a partition flushes on revoke. It outlives
// generations: a cooperative rebalance keeps partitions running, and their
// commits go on in the next generation (Member.Commit uses the current
// one; during a rebalance a commit waits for it to end).
//
// Its state is owned by the run goroutine (the fields below reqs); other
// goroutines talk to it through channels, and read committed under mu.
type Committer struct {
	gen      offsetCommitter
	topic    string
	interval time.Duration
	log      *slog.Logger
	// failures counts failed commits (nil: not counted).
	failures prometheus.Counter
	// Fence is called when a commit shows that this member lost its
	// generation: its partitions must stop writing at once.
	Fence func(error)
	// Halted, when true, suppresses commits (tests simulate kill -9).
	Halted func() bool
	// Denied, if set, takes a failed commit and reports whether it was
	// refused access, which it then reports itself (the worker's
	// accessFailed).
	Denied func(error) bool
	// MaxGap, if set, is the session timeout: a process that did not run
	// for longer (SIGSTOP, a long pause) has lost its membership, and its
	// partitions must not write what they fetched before (a zombie). The
	// same holds for a member whose offset commits have kept failing for
	// that long (cut off from the coordinator, not from the partition
	// leaders): its heartbeats fail too, so the coordinator has expired
	// it. While there is nothing new to commit, the committer re-commits
	// the last offsets every MaxGap/4, so that the time of the last
	// successful commit stays a measure of the coordinator's contact.
	MaxGap time.Duration
	// Now is the clock every decision above reads (nil: time.Now); set
	// before Run. The member's and the committer's clocks are the wall
	// clock in the worker (not its Deps.Now, which tests move in jumps
	// that would read as a stopped process; docs/development.md, "Time").
	// The tickers only say when to look again.
	Now     func() time.Time
	lastRun atomic.Int64 // unix nanoseconds of the last loop iteration; 0 before Run
	paused  atomic.Bool

	reqs   chan commitReq
	forget chan []int
	revive chan struct{}
	stop   chan struct{}
	done   chan struct{}

	// Run goroutine's state.
	pending      map[int]int64
	waiters      []chan error
	stale        bool // the generation is lost: no commits until revive
	lastOK       time.Time
	failingSince time.Time

	mu        sync.Mutex
	committed map[int]int64
	// retries thins the lines of commits failing in a row (brokers
	// away): the first, summaries, and the recovery.
	retries RetryLog
}

type commitReq struct {
	partition int
	offset    int64
	reply     chan error // nil: asynchronous
}

// NewCommitter returns a committer of topic's offsets through gen, every
// interval; fence is called when the member lost its generation (see
// Committer.Fence). Run starts it.
func NewCommitter(gen offsetCommitter, topic string, interval time.Duration, log *slog.Logger, failures prometheus.Counter, fence func(error)) *Committer {
	c := &Committer{
		gen: gen, topic: topic, interval: interval, log: log, failures: failures, Fence: fence,
		reqs: make(chan commitReq, 64), forget: make(chan []int, 16), revive: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		pending: map[int]int64{}, committed: map[int]int64{},
		retries: RetryLog{Log: log, What: "offset commit"},
	}
	return c
}

func (c *Committer) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// ErrStaleGeneration marks commit failures that mean the partitions belong
// to someone else now.
var ErrStaleGeneration = errors.New("offset commit rejected: generation is stale")

// IsStaleGeneration reports whether err says the member's generation is
// gone.
// A rebalance in progress is not: a cooperative member keeps its
// partitions through it, and the commit is retried after it.
func IsStaleGeneration(err error) bool {
	return errors.Is(err, ErrNotMember) || errors.Is(err, kafka.IllegalGeneration) ||
		errors.Is(err, kafka.UnknownMemberId) || errors.Is(err, kafka.FencedInstanceID)
}

// Run commits until Close, then commits what is pending and returns.
func (c *Committer) Run() {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	// The pause clock ticks well inside the session timeout, whatever the
	// commit interval.
	var alive <-chan time.Time
	if c.MaxGap > 0 {
		at := time.NewTicker(c.MaxGap / 4)
		defer at.Stop()
		alive = at.C
	}
	c.retries.Now = c.now
	c.lastOK = c.now()
	c.lastRun.Store(c.lastOK.UnixNano())
	for {
		select {
		case r := <-c.reqs:
			c.add(r)
			if r.reply != nil {
				c.drain()
				c.flush()
			}
		case ps := <-c.forget:
			c.drop(ps)
		case <-c.revive:
			// The member joined a generation: the coordinator answered
			// it, which restarts the contact clock whether or not a
			// commit noticed the loss (the heartbeats may have been
			// first, with nothing pending to commit). Otherwise the
			// failures of an outage before the join would fence the new
			// generation at its first failed commit.
			c.failingSince, c.lastOK = time.Time{}, c.now()
			if c.stale {
				c.stale = false
				c.paused.Store(false)
				c.lastRun.Store(c.lastOK.UnixNano())
			}
		case <-alive:
			c.keepAlive()
		case <-t.C:
			c.flush()
		case <-c.stop:
			c.drain()
			c.flush()
			return
		}
	}
}

func (c *Committer) countFailure() {
	if c.failures != nil {
		c.failures.Inc()
	}
}

// attempt commits offsets and keeps the contact clock. A rebalance in
// progress is an answer from the coordinator: it does not count against
// the contact.
func (c *Committer) attempt(offsets map[int]int64) error {
	err := c.gen.CommitOffsets(map[string]map[int]int64{c.topic: offsets})
	now := c.now()
	switch {
	case err == nil || errors.Is(err, ErrRebalancing):
		c.lastOK, c.failingSince = now, time.Time{}
		c.retries.Succeeded()
	case c.failingSince.IsZero():
		c.failingSince = now
	}
	return err
}

// lostContact fences the member once commits have failed for half the
// session timeout in a row and none succeeded for a whole one.
func (c *Committer) lostContact(err error) bool {
	now := c.now()
	if c.MaxGap <= 0 || c.stale || c.failingSince.IsZero() || now.Sub(c.failingSince) < c.MaxGap/2 || now.Sub(c.lastOK) <= c.MaxGap {
		return false
	}
	c.paused.Store(true)
	c.stale = true
	c.log.Warn("offset commits have failed for longer than the session timeout: the coordinator has presumably given "+
		"this member's partitions to others; stopping its partitions",
		"last_success", now.Sub(c.lastOK).Round(time.Millisecond), "err", err)
	c.Fence(ErrNoContact)
	return true
}

// failed handles a failed commit; it returns the error the waiters get.
func (c *Committer) failed(err error) error {
	switch {
	case errors.Is(err, ErrRebalancing):
		// Kept pending; committed once the rebalance is over.
		c.log.Debug("offset commit waits for the rebalance", "err", err)
		return err
	case IsStaleGeneration(err):
		c.countFailure()
		c.stale = true
		c.log.Warn("offset commit rejected; stopping the member's partitions", "err", err)
		c.Fence(errors.Join(ErrStaleGeneration, err))
		return errors.Join(ErrStaleGeneration, err)
	case c.lostContact(err):
		c.countFailure()
		return errors.Join(ErrNoContact, err)
	}
	c.countFailure()
	if c.Denied == nil || !c.Denied(err) {
		c.retries.Failed(err)
	}
	return err
}

func (c *Committer) flush() {
	var err error
	switch {
	case c.stale:
		err = ErrStaleGeneration
	case c.Halted != nil && c.Halted():
		err = errors.New("worker halted")
	case len(c.pending) > 0:
		if err = c.attempt(c.pending); err == nil {
			c.mu.Lock()
			maps.Copy(c.committed, c.pending)
			c.mu.Unlock()
			c.pending = map[int]int64{}
		} else {
			err = c.failed(err)
		}
	}
	for _, w := range c.waiters {
		w <- err
	}
	c.waiters = c.waiters[:0]
}

func (c *Committer) add(r commitReq) {
	if o, ok := c.pending[r.partition]; !ok || r.offset > o {
		c.pending[r.partition] = r.offset
	}
	if r.reply != nil {
		c.waiters = append(c.waiters, r.reply)
	}
}

// drain takes whatever else is queued, so that one commit covers it.
func (c *Committer) drain() {
	for {
		select {
		case r := <-c.reqs:
			c.add(r)
		default:
			return
		}
	}
}

// drop forgets partitions this member no longer owns: their offsets are
// neither committed nor re-committed by it again (the new owner's would
// be moved back).
func (c *Committer) drop(ps []int) {
	c.mu.Lock()
	for _, p := range ps {
		delete(c.committed, p)
		delete(c.pending, p)
	}
	c.mu.Unlock()
}

// keepAlive notices a pause of the process and, while nothing is pending,
// re-commits the last offsets (the contact clock, see MaxGap).
func (c *Committer) keepAlive() {
	now := c.now()
	if gap := now.Sub(time.Unix(0, c.lastRun.Load())); gap > c.MaxGap && c.paused.CompareAndSwap(false, true) {
		c.log.Warn("this process did not run for longer than the session timeout; stopping its partitions", "gap", gap.Round(time.Millisecond))
		c.stale = true
		c.Fence(ErrPaused)
	}
	c.lastRun.Store(now.UnixNano())
	if c.stale || (c.Halted != nil && c.Halted()) {
		return
	}
	if len(c.pending) == 0 && now.Sub(c.lastOK) >= c.MaxGap/4 {
		c.mu.Lock()
		again := maps.Clone(c.committed)
		c.mu.Unlock()
		if len(again) > 0 {
			if err := c.attempt(again); err != nil {
				c.failed(err)
			}
		}
	}
}

// Offer hands offset of partition to the next commit, without waiting.
func (c *Committer) Offer(ctx context.Context, partition int, offset int64) {
	select {
	case c.reqs <- commitReq{partition: partition, offset: offset}:
	case <-ctx.Done():
	case <-c.done:
	}
}

// CommitNow commits offset (and everything pending) and waits for the result.
func (c *Committer) CommitNow(ctx context.Context, partition int, offset int64) error {
	reply := make(chan error, 1)
	select {
	case c.reqs <- commitReq{partition: partition, offset: offset, reply: reply}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errors.New("committer stopped")
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrPaused: the process did not run for longer than the session timeout;
// the coordinator has given its partitions to others.
var ErrPaused = fmt.Errorf("%w: the process was paused for longer than the session timeout", ErrStaleGeneration)

// ErrNoContact: offset commits failed for longer than the session timeout;
// the coordinator has presumably given the partitions to others.
var ErrNoContact = fmt.Errorf("%w: offset commits failed for longer than the session timeout", ErrStaleGeneration)

// PausedTooLong reports whether the process has not run the committer for
// longer than the session timeout, or found that it had not: partitions
// check it before each write, whichever goroutine runs first after a pause.
func (c *Committer) PausedTooLong() bool {
	if c.MaxGap <= 0 {
		return false
	}
	last := c.lastRun.Load()
	return c.paused.Load() || (last != 0 && c.now().Sub(time.Unix(0, last)) > c.MaxGap)
}

// LastCommitted returns the last offset this committer committed for p.
func (c *Committer) LastCommitted(p int) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.committed[p]
	return o, ok
}

// Close stops Run, after it committed what is pending, and waits for it.
func (c *Committer) Close() {
	close(c.stop)
	<-c.done
}

// ForgetPartitions drops partitions the member gave up or lost (drop).
func (c *Committer) ForgetPartitions(ps []int) {
	select {
	case c.forget <- ps:
	case <-c.done:
	}
}

// ReviveAfterLoss tells the committer that the member joined a new
// generation: one that found its generation lost commits again, and the
// contact clock (MaxGap) restarts.
func (c *Committer) ReviveAfterLoss() {
	select {
	case c.revive <- struct{}{}:
	default:
	}
}
