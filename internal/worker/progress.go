package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bloomgate/bloomgate/internal/quantity"
)

// Long phases before a partition runs (seeding, replay, the output scan,
// rebuilding lost generations)
// report their progress three ways: PartitionStatus.Progress (status page,
// /status.json), the gauge bloomgate_recovery_remaining_offsets{phase}, and
// a log line every progressLogInterval once a phase has run that long.
const (
	phaseSeeding   = "seeding"
	phaseReplaying = "replaying"
	phaseScanning  = "scanning"

	progressLogInterval    = 15 * time.Second
	progressStatusInterval = 200 * time.Millisecond
)

var phases = []string{phaseSeeding, phaseReplaying, phaseScanning, phaseRebuilding}

// progress tracks one phase of one partition. Only the partition's
// goroutine uses it.
type progress struct {
	pp       *partitionProc
	phase    string
	topic    string // "" for the input
	from, to int64
	began    time.Time
	loggedAt time.Time
	shownAt  time.Time
	done     int64
	keys     uint64
}

// beginProgress starts tracking a phase over [from, to) and shows it.
func (pp *partitionProc) beginProgress(phase string, from, to int64) *progress {
	now := pp.w.deps.Now()
	pr := &progress{pp: pp, phase: phase, from: from, to: to, began: now, loggedAt: now}
	pr.show(now)
	return pr
}

// update records that done offsets of the range are passed and keys keys
// inserted; the status and the gauge follow at most every
// progressStatusInterval, the log
// every progressLogInterval.
func (pr *progress) update(done int64, keys uint64) {
	pr.done, pr.keys = done, keys
	now := pr.pp.w.deps.Now()
	if now.Sub(pr.shownAt) >= progressStatusInterval {
		pr.show(now)
	}
	if now.Sub(pr.loggedAt) >= progressLogInterval {
		pr.loggedAt = now
		v := pr.value(now)
		pr.pp.log.Info(fmt.Sprintf("%s: %.0f%% (%d of %d offsets), %d keys, %.0f offsets/s, about %s left",
			pr.phase, 100*v.Fraction(), v.Done, v.To-v.From, v.Keys, v.Rate, etaText(v.ETASeconds)),
			"phase", pr.phase, "from", pr.from, "to", pr.to, "done", v.Done, "keys", v.Keys)
	}
}

// end clears the phase from the status and the gauge.
func (pr *progress) end() {
	pr.pp.pm.remaining[pr.phase].Set(0)
	pr.pp.w.updatePartition(pr.pp.p, func(ps *PartitionStatus) { ps.Progress = nil })
}

func (pr *progress) show(now time.Time) {
	pr.shownAt = now
	v := pr.value(now)
	pr.pp.pm.remaining[pr.phase].Set(float64(max(v.To-v.From-v.Done, 0)))
	pr.pp.w.updatePartition(pr.pp.p, func(ps *PartitionStatus) { ps.Progress = &v })
}

func (pr *progress) value(now time.Time) Progress {
	v := Progress{Phase: pr.phase, Topic: pr.topic, From: pr.from, To: pr.to, Done: pr.done, Keys: pr.keys}
	if el := now.Sub(pr.began).Seconds(); el > 0 && pr.done > 0 {
		v.Rate = float64(pr.done) / el
		v.ETASeconds = float64(max(pr.to-pr.from-pr.done, 0)) / v.Rate
	}
	return v
}

func etaText(s float64) string {
	if s <= 0 {
		return "unknown time"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// totals are the worker's counts since start, for the progress line.
type totals struct {
	consumed, forwarded, duplicates, deadLettered, dropped, replayed uint64
}

// progressSchedule says when the worker's progress line comes: the first
// after first (a start or a backlog is reported within seconds), then every
// every. Input is sampled every sample, to tell the time spent working from
// idle time and to notice when the worker has caught up (catchup.go).
type progressSchedule struct {
	first, every, sample time.Duration
}

// workerProgress: one info line a minute says what the worker did and
// where it stands, so a log alone tells a healthy worker from a stuck one;
// the first comes 10 s after the start.
var workerProgress = progressSchedule{first: 10 * time.Second, every: time.Minute, sample: time.Second}

// logProgress writes the periodic progress line, and the lines that say the
// worker caught up with its input or fell behind, until ctx ends.
//
// Rates are per second of active time: the samples in which records were
// consumed or replayed, in whole samples (1 s). A backlog of 1 M records
// handled in 5 s then reads 200000/s, not 1 M over the minute; a line
// without any input says idle=true.
func (w *Worker) logProgress(ctx context.Context, sch progressSchedule) {
	t := time.NewTicker(sch.sample)
	defer t.Stop()
	start := w.deps.Now()
	last, lastAt := w.totals(), start // as of the last line
	prev, prevAt := last, start       // as of the last sample
	var active time.Duration
	due := start.Add(sch.first)
	var cu catchUp
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, cur := w.deps.Now(), w.totals()
		if cur.consumed != prev.consumed || cur.replayed != prev.replayed {
			active += now.Sub(prevAt)
		}
		prev, prevAt = cur, now
		s := w.Status()
		w.followCatchUp(&cu, s, cur, now)
		if now.Before(due) {
			continue
		}
		w.progressLine(s, now.Sub(lastAt), active, cur, last, now)
		last, lastAt, active, due = cur, now, 0, now.Add(sch.every)
	}
}

// progressLine logs what the worker did in the last interval, of which it
// was active for active, and where it stands.
func (w *Worker) progressLine(s Status, interval, active time.Duration, cur, last totals, now time.Time) {
	var lag, fill int64
	running, paused, stalled := 0, 0, 0
	var oldest time.Time
	for _, p := range s.Partitions {
		lag += p.ForwardLag()
		fill += p.FillLag
		if p.State == "running" {
			running++
		}
		if p.CommitsPaused {
			paused++
		}
		if p.Stalled {
			stalled++
		}
		if !p.LastCheckpoint.IsZero() && (oldest.IsZero() || p.LastCheckpoint.Before(oldest)) {
			oldest = p.LastCheckpoint
		}
	}
	rate := func(a, b uint64) string {
		if active <= 0 {
			return "0.0/s"
		}
		return fmt.Sprintf("%.1f/s", float64(a-b)/active.Seconds())
	}
	attrs := []any{
		"interval", interval.Round(time.Second).String(), "active", active.Round(time.Second).String(),
		"consumed", rate(cur.consumed, last.consumed), "forwarded", rate(cur.forwarded, last.forwarded),
		"duplicates", rate(cur.duplicates, last.duplicates),
		"dead_lettered", rate(cur.deadLettered, last.deadLettered), "dropped", rate(cur.dropped, last.dropped),
		// Totals since start: what the rates add up to.
		"consumed_total", cur.consumed, "forwarded_total", cur.forwarded, "duplicates_total", cur.duplicates,
	}
	if cur.replayed != last.replayed {
		attrs = append(attrs, "replayed", rate(cur.replayed, last.replayed))
	}
	if active == 0 && s.Ready {
		// Nothing came: not a rate of zero diluted over the interval, and
		// not a partition busy restoring (partitions_running says that).
		attrs = append(attrs, "idle", true)
	}
	attrs = append(attrs, "lag", lag)
	if fill > 0 {
		// Seeded or replayed into the filters, not forwarded: not lag.
		attrs = append(attrs, "fill_lag", fill)
	}
	attrs = append(attrs, "partitions_running", running, "partitions_assigned", len(s.Assigned),
		"generation", s.Generation, "joined", s.Joined)
	if !oldest.IsZero() {
		attrs = append(attrs, "oldest_checkpoint_age", now.Sub(oldest).Round(time.Second).String())
	}
	if paused > 0 {
		attrs = append(attrs, "commits_paused_partitions", paused)
	}
	if stalled > 0 {
		attrs = append(attrs, "stalled_partitions", stalled)
	}
	w.log.Info("progress", attrs...)
}

func (w *Worker) totals() totals {
	return totals{
		consumed: w.count.consumed.Load(), forwarded: w.count.forwarded.Load(), duplicates: w.count.duplicates.Load(),
		deadLettered: w.count.deadLettered.Load(), dropped: w.count.dropped.Load(), replayed: w.count.replayed.Load(),
	}
}

// logStart says what the worker is about to do, with the memory it plans:
// one partition's filter at its planned size, and all partitions of the
// input (what one worker holds if it is the group's only member). Filters
// allocate their generations as keys arrive: what is allocated now is on
// the status page (Status.PlannedFilterBytes against the partitions'
// FilterStats.Bytes).
func (w *Worker) logStart() {
	n := w.partitions[w.cfg.Input]
	attrs := []any{"partitions", n, "filter_capacity_per_partition", quantity.Count(w.params.Capacity)}
	if pl, ok := w.deps.State.(Planner); ok {
		per := pl.PlannedBytes(w.params)
		w.mu.Lock()
		w.plannedPerPartition = per
		w.mu.Unlock()
		attrs = append(attrs, "filter_memory_planned_per_partition", ByteSize(per),
			"filter_memory_planned_all_partitions", ByteSize(per*uint64(n)),
			"filter_memory_allocated", "as keys arrive")
	}
	w.log.Info("worker started", attrs...)
}

// ByteSize prints a byte count as every output does (quantity.Bytes:
// 512 B, 27.4 KiB, 21.3 MiB).
type ByteSize uint64

func (b ByteSize) String() string { return quantity.Bytes(uint64(b)) }

// LogValue logs a ByteSize as its text in every handler.
func (b ByteSize) LogValue() slog.Value { return slog.StringValue(b.String()) }
