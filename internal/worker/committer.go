package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// offsetCommitter is what the committer needs of a kafka.Generation.
type offsetCommitter interface {
	CommitOffsets(offsets map[string]map[int]int64) error
}

// committer is the only caller of CommitOffsets for one generation:
// concurrent calls busy-spin in kafka-go (#966). Partitions hand it offsets
// whose output writes are acknowledged; it commits them every interval, and
// at once when a partition flushes on revoke.
type committer struct {
	gen      offsetCommitter
	topic    string
	interval time.Duration
	log      *slog.Logger
	m        *metrics
	// fence is called when a commit shows that this member lost the
	// generation: its partitions must stop writing at once.
	fence func(error)
	// halted, when true, suppresses commits (tests simulate kill -9).
	halted func() bool
	// denied, if set, takes a failed commit and reports whether it was
	// refused access, which it then reports itself (access.go).
	denied func(error) bool
	// maxGap, if set, is the session timeout: a process that did not run
	// for longer (SIGSTOP, a long pause) has lost its membership, and its
	// partitions must not write what they fetched before (a zombie). The
	// same holds for a member whose offset commits have kept failing for
	// that long (cut off from the coordinator, not from the partition
	// leaders): its heartbeats fail too, so the coordinator has expired
	// it. While there is nothing new to commit, the committer re-commits
	// the last offsets every maxGap/4, so that the time of the last
	// successful commit stays a measure of the coordinator's contact.
	maxGap  time.Duration
	lastRun atomic.Int64 // unix nanoseconds of the last loop iteration
	paused  atomic.Bool

	reqs chan commitReq
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	committed map[int]int64
}

type commitReq struct {
	partition int
	offset    int64
	reply     chan error // nil: asynchronous
}

func newCommitter(gen offsetCommitter, topic string, interval time.Duration, log *slog.Logger, m *metrics, fence func(error)) *committer {
	c := &committer{
		gen: gen, topic: topic, interval: interval, log: log, m: m, fence: fence,
		reqs: make(chan commitReq, 64), stop: make(chan struct{}), done: make(chan struct{}),
		committed: map[int]int64{},
	}
	c.lastRun.Store(time.Now().UnixNano())
	return c
}

// errStaleGeneration marks commit failures that mean the partitions belong
// to someone else now.
var errStaleGeneration = errors.New("offset commit rejected: generation is stale")

func isStaleGeneration(err error) bool {
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) ||
		errors.Is(err, kafka.FencedInstanceID) || errors.Is(err, kafka.RebalanceInProgress)
}

// run commits until stop is closed, then commits what is pending and returns.
func (c *committer) run() {
	defer close(c.done)
	pending := map[int]int64{}
	var waiters []chan error
	t := time.NewTicker(c.interval)
	defer t.Stop()
	// The pause clock ticks well inside the session timeout, whatever the
	// commit interval.
	var alive <-chan time.Time
	if c.maxGap > 0 {
		at := time.NewTicker(c.maxGap / 4)
		defer at.Stop()
		alive = at.C
	}
	stale := false
	lastOK, failingSince := time.Now(), time.Time{}
	// attempt commits offsets and keeps the contact clock.
	attempt := func(offsets map[int]int64) error {
		err := c.gen.CommitOffsets(map[string]map[int]int64{c.topic: offsets})
		now := time.Now()
		if err == nil {
			lastOK, failingSince = now, time.Time{}
		} else if failingSince.IsZero() {
			failingSince = now
		}
		return err
	}
	// lostContact fences the generation once commits have failed for half
	// the session timeout in a row and none succeeded for a whole one.
	lostContact := func(err error) bool {
		now := time.Now()
		if c.maxGap <= 0 || stale || failingSince.IsZero() || now.Sub(failingSince) < c.maxGap/2 || now.Sub(lastOK) <= c.maxGap {
			return false
		}
		c.paused.Store(true)
		stale = true
		c.log.Warn("offset commits have failed for longer than the session timeout: the coordinator has presumably given "+
			"this member's partitions to others; stopping this generation's partitions",
			"last_success", now.Sub(lastOK).Round(time.Millisecond), "err", err)
		c.fence(errNoContact)
		return true
	}
	flush := func() {
		var err error
		if stale {
			err = errStaleGeneration
		} else if c.halted != nil && c.halted() {
			err = errors.New("worker halted")
		} else if len(pending) > 0 {
			err = attempt(pending)
			if err == nil {
				c.mu.Lock()
				for p, o := range pending {
					c.committed[p] = o
				}
				c.mu.Unlock()
				pending = map[int]int64{}
			} else {
				c.m.commitFailures.Inc()
				if isStaleGeneration(err) {
					stale = true
					c.log.Warn("offset commit rejected; stopping this generation's partitions", "err", err)
					c.fence(errors.Join(errStaleGeneration, err))
					err = errors.Join(errStaleGeneration, err)
				} else if lostContact(err) {
					err = errors.Join(errNoContact, err)
				} else if c.denied == nil || !c.denied(err) {
					c.log.Warn("offset commit failed; retrying", "err", err)
				}
			}
		}
		for _, w := range waiters {
			w <- err
		}
		waiters = waiters[:0]
	}
	add := func(r commitReq) {
		if o, ok := pending[r.partition]; !ok || r.offset > o {
			pending[r.partition] = r.offset
		}
		if r.reply != nil {
			waiters = append(waiters, r.reply)
		}
	}
	// drain takes whatever else is queued, so that one commit covers it.
	drain := func() {
		for {
			select {
			case r := <-c.reqs:
				add(r)
			default:
				return
			}
		}
	}
	for {
		select {
		case r := <-c.reqs:
			add(r)
			if r.reply != nil {
				drain()
				flush()
			}
		case <-alive:
			now := time.Now()
			if gap := now.Sub(time.Unix(0, c.lastRun.Load())); gap > c.maxGap && c.paused.CompareAndSwap(false, true) {
				c.log.Warn("this process did not run for longer than the session timeout; stopping this generation's partitions", "gap", gap.Round(time.Millisecond))
				stale = true
				c.fence(errPaused)
			}
			c.lastRun.Store(now.UnixNano())
			if stale || (c.halted != nil && c.halted()) {
				break
			}
			if len(pending) == 0 && now.Sub(lastOK) >= c.maxGap/4 {
				c.mu.Lock()
				again := maps.Clone(c.committed)
				c.mu.Unlock()
				if len(again) > 0 {
					if err := attempt(again); err != nil {
						c.m.commitFailures.Inc()
						if isStaleGeneration(err) {
							stale = true
							c.log.Warn("offset commit rejected; stopping this generation's partitions", "err", err)
							c.fence(errors.Join(errStaleGeneration, err))
						} else if !lostContact(err) && (c.denied == nil || !c.denied(err)) {
							c.log.Warn("offset commit failed; retrying", "err", err)
						}
					}
				}
			}
		case <-t.C:
			flush()
		case <-c.stop:
			drain()
			flush()
			return
		}
	}
}

// offer hands over an acknowledged offset; it never blocks for long.
func (c *committer) offer(ctx context.Context, partition int, offset int64) {
	select {
	case c.reqs <- commitReq{partition: partition, offset: offset}:
	case <-ctx.Done():
	case <-c.done:
	}
}

// commitNow commits offset (and everything pending) and waits for the result.
func (c *committer) commitNow(ctx context.Context, partition int, offset int64) error {
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

// errPaused: the process did not run for longer than the session timeout;
// the coordinator has given its partitions to others.
var errPaused = fmt.Errorf("%w: the process was paused for longer than the session timeout", errStaleGeneration)

// errNoContact: offset commits failed for longer than the session timeout;
// the coordinator has presumably given the partitions to others.
var errNoContact = fmt.Errorf("%w: offset commits failed for longer than the session timeout", errStaleGeneration)

// pausedTooLong reports whether the process has not run the committer for
// longer than the session timeout, or found that it had not: partitions
// check it before each write, whichever goroutine runs first after a pause.
func (c *committer) pausedTooLong() bool {
	if c.maxGap <= 0 {
		return false
	}
	return c.paused.Load() || time.Since(time.Unix(0, c.lastRun.Load())) > c.maxGap
}

// lastCommitted returns the last offset this committer committed for p.
func (c *committer) lastCommitted(p int) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.committed[p]
	return o, ok
}

func (c *committer) close() {
	close(c.stop)
	<-c.done
}
