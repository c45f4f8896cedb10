package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/describegroups"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/loadgen"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// demo is the state the actors of `bloomgate dev` share: the producer's
// ground truth, the worker's counts and how the run ended.
type demo struct {
	ctx        context.Context // ends on Ctrl-C / SIGTERM
	sc         devScenario
	opts       Options
	cfg        *config.Run
	plan       capacityPlan
	w          *worker.Worker
	worker     *stage
	store      *checkpoint.Store
	brokerAddr string
	reg        prometheus.Gatherer // the worker's metrics (exact mode's answers)

	stdout, stderr io.Writer
	tty            bool
	lw             *lineWriter
	cpURL          string // redacted, for display (checkpoint.RedactURL)
	metricsAddr    string
	prog           string // the command as the user runs it

	counts   countTracker
	produced atomic.Int64 // events acknowledged so far

	mu      sync.Mutex
	start   time.Time // the producer started
	truth   *devTruth // set once the producer stopped
	prodErr error
	last    devPoll // the monitor's last look
	elapsed time.Duration
	end     devEnd
	cause   error         // what stopped the run early
	check   *forwardCheck // crawler: the output read back
	final   devPoll       // after the worker stopped
}

// devTruth is the producer's ground truth: what reached the broker.
type devTruth struct {
	events, unique, duplicates int64
	planned                    int64 // --events
	bytes                      int64 // keys, values and headers written

	// Crawler only.
	fetchers []int64 // events per fetcher
	// crossPartition counts duplicate events that landed in a partition
	// their URL had not reached before: what a per-partition filter without
	// the repartition hop would forward again.
	crossPartition int64
	urls           map[[2]uint64]struct{} // canonical URLs written, by hash
}

// devEnd is how the run ended.
type devEnd int

const (
	endRunning     devEnd = iota
	endDrained            // everything produced was consumed
	endInterrupted        // Ctrl-C; devPoll.complete says whether the worker caught up
	endTimeout            // --drain-timeout passed without progress
	endFailed             // a stage failed (demo.cause)
)

// devCounts are the worker's counters, summed over partitions.
type devCounts struct {
	consumed, forwarded, duplicates, deadLettered, dropped uint64
}

// countTracker sums the counts of Worker.Status. Status lists the
// partitions the worker holds now, each with its counts since it took the
// partition, and a released partition leaves the list. The tracker keeps
// the newest snapshot of every (partition, generation), so that totals
// survive the worker's shutdown, and notes whether each was taken after the
// partition stopped processing (state "stopping"), when it is final.
type countTracker struct {
	mu    sync.Mutex
	parts map[[2]int64]worker.PartitionStatus
}

func (t *countTracker) observe(s worker.Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parts == nil {
		t.parts = map[[2]int64]worker.PartitionStatus{}
	}
	for _, p := range s.Partitions {
		t.parts[[2]int64{int64(p.Partition), int64(p.Generation)}] = p
	}
}

// totals sums the newest snapshots; final reports whether each was taken
// once its partition had stopped processing.
func (t *countTracker) totals() (c devCounts, final bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	final = len(t.parts) > 0
	for _, p := range t.parts {
		c.consumed += p.Consumed
		c.forwarded += p.Forwarded
		c.duplicates += p.Duplicates
		c.deadLettered += p.DeadLettered
		c.dropped += p.Dropped
		final = final && p.State == "stopping"
	}
	return c, final
}

// devPoll is one look at the worker and the topics.
type devPoll struct {
	counts devCounts
	final  bool // every partition's counts were final
	// inputEnd is the number of records in the input topic, hopEnd in the
	// repartition topic, hopDone the input offsets the hop has committed
	// (-1: not read).
	inputEnd, hopEnd, hopDone int64
	// complete: the producer stopped and the worker consumed everything it
	// wrote (through the hop, for the crawler).
	complete bool
}

// workerEnd is the number of records in the worker's input topic.
func (p devPoll) workerEnd(sc devScenario) int64 {
	if sc.repartition {
		return p.hopEnd
	}
	return p.inputEnd
}

// poll reads the worker's status and the topics' ends.
func (d *demo) poll() devPoll {
	d.counts.observe(d.w.Status())
	var p devPoll
	p.counts, p.final = d.counts.totals()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(d.brokerAddr)}
	p.inputEnd, p.hopEnd, p.hopDone = -1, -1, -1
	if n, err := topicEnd(ctx, cl, d.sc.input, d.opts.partitions); err == nil {
		p.inputEnd = n
	}
	if d.sc.repartition {
		if n, err := topicEnd(ctx, cl, d.cfg.RepartitionTopic(), d.opts.partitions); err == nil {
			p.hopEnd = n
		}
		if n, err := committed(ctx, cl, d.cfg.RepartitionTopic(), d.sc.input, d.opts.partitions); err == nil {
			p.hopDone = n
		}
	}
	d.mu.Lock()
	truth := d.truth
	d.mu.Unlock()
	end := p.workerEnd(d.sc)
	p.complete = truth != nil && p.inputEnd >= truth.events && end >= 0 && p.counts.consumed >= uint64(end) &&
		(!d.sc.repartition || p.hopDone >= p.inputEnd)
	return p
}

// topicEnd sums the high watermarks of a topic's partitions.
func topicEnd(ctx context.Context, cl *kafka.Client, topic string, partitions int) (int64, error) {
	req := make([]kafka.OffsetRequest, partitions)
	for p := range req {
		req[p] = kafka.LastOffsetOf(p)
	}
	res, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return 0, po.Error
		}
		n += po.LastOffset
	}
	return n, nil
}

// committed sums the offsets a group committed on a topic.
func committed(ctx context.Context, cl *kafka.Client, group, topic string, partitions int) (int64, error) {
	ps := make([]int, partitions)
	for p := range ps {
		ps[p] = p
	}
	res, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return 0, err
	}
	if res.Error != nil {
		return 0, res.Error
	}
	var n int64
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return 0, po.Error
		}
		n += max(po.CommittedOffset, 0)
	}
	return n, nil
}

// producer is the actor writing the scenario's input once the worker is
// ready (so that the throughput shown is the worker's, not a backlog
// drained later). After writing it waits for the interrupt, which stops a
// producer still writing and waits for its ground truth.
func (d *demo) producer(gen loadgen.GenConfig) (func() error, func(error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	execute := func() error {
		defer close(done)
		if err := d.waitReady(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.mu.Lock()
		d.start = time.Now()
		d.mu.Unlock()
		truth, err := d.produce(ctx, gen)
		truth.planned = int64(d.opts.events)
		d.produced.Store(truth.events)
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("demo producer: %w", err)
		} else {
			err = nil
		}
		d.mu.Lock()
		d.truth, d.prodErr = &truth, err
		d.mu.Unlock()
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	return execute, func(error) {
		cancel()
		<-done
	}
}

// waitReady waits until the worker (and the crawler's repartition hop) have
// joined their groups, and the worker has restored every partition.
func (d *demo) waitReady(ctx context.Context) error {
	if err := waitReady(ctx, d.w, devReadyLimit); err != nil || !d.sc.repartition {
		return err
	}
	// The raw request: kafka-go's DescribeGroups fails on members whose
	// metadata is of consumer protocol version 2 or 3 (bloomgate's,
	// franz-go's, librdkafka's), and its state is all that is asked here.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	deadline := time.Now().Add(devReadyLimit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := tr.RoundTrip(rctx, kafka.TCP(d.brokerAddr), &describegroups.Request{Groups: []string{d.cfg.RepartitionTopic()}})
		cancel()
		if err == nil {
			if gs := res.(*describegroups.Response).Groups; len(gs) == 1 && gs[0].ErrorCode == 0 && gs[0].GroupState == "Stable" && len(gs[0].Members) > 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("repartition hop: group %s not stable after %s", d.cfg.RepartitionTopic(), devReadyLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// monitor is the actor that prints progress, ends the demo once everything
// produced was consumed (or nothing moved for --drain-timeout) and, for the
// crawler, reads the output back. Interrupted, it first lets the worker
// consume what the producer wrote before it was stopped (at most
// devCatchUp), so that the summary can still compare with the ground truth.
func (d *demo) monitor() (func() error, func(error)) {
	stop := make(chan error, 1)
	done := make(chan struct{})
	execute := func() error {
		defer close(done)
		pr := &progress{w: d.stderr, tty: d.tty, lw: d.lw, sc: d.sc}
		defer pr.finish()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var (
			lastPrint    time.Time
			lastConsumed uint64
			lastChange   time.Time
		)
		for {
			select {
			case cause := <-stop:
				d.stopped(cause, pr)
				return nil
			case <-tick.C:
			}
			d.mu.Lock()
			start, produced := d.start, d.truth != nil
			d.mu.Unlock()
			if start.IsZero() {
				continue
			}
			p := d.poll()
			d.observed(start, p)
			now := time.Now()
			if lastPrint.IsZero() {
				lastPrint = start
			}
			if p.complete || now.Sub(lastPrint) >= d.opts.progressEvery {
				pr.line(start, d.produced.Load(), p)
				lastPrint = now
			}
			// The drain clock starts at the first look: a producer that
			// finished before it must not count as time without progress.
			if p.counts.consumed != lastConsumed || !produced || lastChange.IsZero() {
				lastConsumed, lastChange = p.counts.consumed, now
			}
			switch {
			case p.complete:
				d.finished(endDrained, nil)
				d.verify()
				if !d.opts.keepRunning {
					return nil
				}
				pr.finish()
				d.writeKeepRunning()
				fmt.Fprintf(d.stderr, "demo data consumed; broker and worker keep running until Ctrl-C\n")
				d.stopped(<-stop, pr)
				return nil
			case now.Sub(lastChange) > d.opts.drainTimeout:
				d.finished(endTimeout, nil)
				return fmt.Errorf("the worker consumed %d of the %d events written within --drain-timeout %s",
					p.counts.consumed, max(p.workerEnd(d.sc), 0), d.opts.drainTimeout)
			}
		}
	}
	return execute, func(cause error) {
		select {
		case stop <- cause:
		default:
		}
		<-done
	}
}

// observed records the monitor's look; the elapsed time runs until the
// worker consumed its last record, not until the monitor noticed.
func (d *demo) observed(start time.Time, p devPoll) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.counts.consumed != d.last.counts.consumed || d.elapsed == 0 {
		d.elapsed = time.Since(start)
	}
	d.last = p
}

func (d *demo) finished(end devEnd, cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.end == endRunning {
		d.end, d.cause = end, cause
	}
}

// stopped handles the group's interrupt: after Ctrl-C the producer has
// stopped (its interrupt ran first) and the worker gets devCatchUp to
// consume what it wrote; after a failure there is nothing to wait for.
func (d *demo) stopped(cause error, pr *progress) {
	d.mu.Lock()
	start, truth, end := d.start, d.truth, d.end
	d.mu.Unlock()
	if end != endRunning {
		return // drained, timed out, or kept running after the summary
	}
	if d.ctx.Err() == nil || start.IsZero() || truth == nil {
		d.finished(endFailed, cause)
		return
	}
	d.finished(endInterrupted, nil)
	pr.finish()
	fmt.Fprintf(d.stderr, "interrupted: the producer stopped after %d events; the worker gets up to %s to consume them ...\n",
		truth.events, devCatchUp)
	deadline := time.Now().Add(devCatchUp)
	for {
		p := d.poll()
		d.observed(start, p)
		if p.complete {
			pr.line(start, truth.events, p)
			pr.finish()
			d.verify()
			return
		}
		select {
		case <-d.worker.done:
		case <-time.After(50 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
		}
		pr.line(start, truth.events, p)
		pr.finish()
		return
	}
}

// verify reads the crawler's output back (orders compare counts only).
func (d *demo) verify() {
	if !d.sc.repartition {
		return
	}
	d.mu.Lock()
	truth := d.truth
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := d.checkForwarded(ctx, truth)
	d.mu.Lock()
	d.check = &c
	d.mu.Unlock()
}

// workerStopping runs while the worker shuts down: it keeps reading the
// status until the worker has stopped, so that the counts of its last
// batches are not lost, then reads the topics' ends once more.
func (d *demo) workerStopping(done <-chan struct{}) {
	fmt.Fprintln(d.stderr, "stopping: worker flushes, commits and writes final checkpoints ...")
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			p := d.poll()
			d.mu.Lock()
			d.final = p
			d.mu.Unlock()
			return
		case <-t.C:
			d.counts.observe(d.w.Status())
		}
	}
}

// finish turns the group's result into the summary and the command's
// error.
func (d *demo) finish(groupErr error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.start.IsZero() {
		if d.ctx.Err() != nil && groupErr != nil && errors.Is(groupErr, context.Canceled) {
			fmt.Fprintln(d.stderr, "interrupted before the worker was ready; stopped")
			return nil
		}
		return groupErr
	}
	if d.prodErr != nil {
		return d.prodErr
	}
	s := d.summary(false)
	if d.opts.keepRunning && d.end == endDrained {
		c := s.counts
		fmt.Fprintf(d.stdout, "stopped after %d consumed, %d forwarded, %d duplicates; checkpoints in %s\n",
			c.consumed, c.forwarded, c.duplicates, d.cpURL)
	} else {
		writeDevSummary(d.stdout, s)
	}
	switch d.end {
	case endDrained, endInterrupted:
		if d.worker.err != nil {
			return d.worker.err
		}
		return nil
	}
	return groupErr
}
