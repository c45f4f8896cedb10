package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
)

// Status is a snapshot of the worker for /readyz and the status page.
type Status struct {
	// Ready: joined a generation and every assigned partition restored.
	Ready  bool `json:"ready"`
	Joined bool `json:"joined"`
	// UnjoinedSeconds: time since the worker was last in a generation (0
	// while it is); beyond the rebalance timeout the group is stalled.
	UnjoinedSeconds float64 `json:"unjoined_seconds,omitempty"`
	// Fenced: another member took this worker's static instance id; it
	// stays idle (Worker.idleFenced). The error, with the fix.
	Fenced string `json:"fenced,omitempty"`
	// JoinError: while not in a generation, why the last attempt to join
	// failed (naming --brokers when no broker answered).
	JoinError  string `json:"join_error,omitempty"`
	Generation int32  `json:"generation"`
	MemberID   string `json:"member_id"`
	Assigned   []int  `json:"assigned"`
	// PlannedFilterBytes is the planned filter memory of the assigned
	// partitions (0: not known). Filters allocate it as keys arrive; what
	// is allocated now is the partitions' Filter.Bytes.
	PlannedFilterBytes uint64            `json:"planned_filter_bytes,omitempty"`
	Partitions         []PartitionStatus `json:"partitions"`
	Error              string            `json:"error,omitempty"`
	// SettingsConflicts lists the group's members whose settings differ
	// from this worker's (agreement.go), as of the last generation joined.
	SettingsConflicts []conflict `json:"settings_conflicts,omitempty"`
	// ForeignMembers lists the group's members that are not bloomgate
	// workers, and Unprocessed the input partitions no member that agrees
	// with this one processes (agreement.go), as of the last generation
	// joined.
	ForeignMembers []foreignMember `json:"foreign_members,omitempty"`
	Unprocessed    []int           `json:"unprocessed_partitions,omitempty"`
	// UnprocessedLag is the records waiting in them.
	UnprocessedLag int64 `json:"unprocessed_lag,omitempty"`
	// CrossPartition, if set, says that keys were met in two partitions
	// of the input: it is not keyed by the dedup key (crosspartition.go).
	CrossPartition *crossPartitionStatus `json:"cross_partition,omitempty"`
}

// PartitionStatus describes one assigned partition.
type PartitionStatus struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	Generation int32  `json:"generation"`
	// State: restoring, recovering (output scan), seeding (a new group's
	// memory, from --seed-topic or the input before its start), replaying,
	// running,
	// failing (a session failed; recovery runs again after a backoff),
	// stalled (waits before a record the output refuses; Unwritable),
	// stopping.
	State string `json:"state"`
	// NextOffset is the next input offset to process (all before it written
	// and acknowledged).
	NextOffset int64 `json:"next_offset"`
	// ResumeOffset is where forwarding resumes after the session's
	// seeding or replay: input before it only fills the filter.
	ResumeOffset int64 `json:"resume_offset"`
	Committed    int64 `json:"committed_offset"`
	// Lag is how far the input's high-water mark is ahead of NextOffset.
	// FillLag is the part of it before ResumeOffset, which a seeding or a
	// replay reads into the filter without forwarding; the rest
	// (ForwardLag) waits to be forwarded.
	Lag     int64 `json:"lag"`
	FillLag int64 `json:"fill_lag"`
	// LSOLag is how many offsets beyond the last stable offset the
	// partition holds: records of open upstream transactions that
	// read_committed waits for.
	LSOLag int64 `json:"lso_lag"`
	// Skipped counts offsets passed over without being events:
	// transaction markers and records of aborted transactions.
	SkippedMarkers uint64  `json:"skipped_markers"`
	SkippedAborted uint64  `json:"skipped_aborted"`
	Rate           float64 `json:"rate_per_second"` // consumed records/s, smoothed

	Consumed     uint64 `json:"consumed"`
	Forwarded    uint64 `json:"forwarded"`
	Duplicates   uint64 `json:"duplicates"`
	DeadLettered uint64 `json:"dead_lettered"`
	Dropped      uint64 `json:"dropped"`

	Filter               FilterStats   `json:"filter"`
	LastCheckpoint       time.Time     `json:"last_checkpoint"`
	LastCheckpointOffset int64         `json:"last_checkpoint_offset"`
	CheckpointError      string        `json:"checkpoint_error,omitempty"`
	CommitsPaused        bool          `json:"commits_paused"`
	RecoveryReplayed     int64         `json:"recovery_replayed"`
	RecoverySkipped      int           `json:"recovery_skipped"`
	RecoveryDuration     time.Duration `json:"-"`
	RecoverySeconds      float64       `json:"recovery_seconds"`
	// Progress is set while the partition seeds, replays, rebuilds lost
	// generations or scans its outputs before it runs; nil once it runs.
	Progress *Progress `json:"progress,omitempty"`

	// Stalled: input waits beyond the partition's position and the
	// position has not moved for the stall threshold (StallAfter), whatever
	// the cause (writes failing and retried, a restore that does not
	// finish, …), or the partition waits before an unwritable record
	// (Unwritable set; State stalled once it reached it). StalledSeconds is how long input has waited without
	// progress, 0 while the partition progresses or has nothing to read.
	Stalled        bool    `json:"stalled"`
	StalledSeconds float64 `json:"stalled_seconds"`
	// LastError is the partition's last failure (a failed write, fetch or
	// recovery) or why it stalls; LastErrorAt is when. Kept after the
	// partition recovered.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Unwritable is the record a stalled partition waits before.
	Unwritable *Unwritable `json:"unwritable,omitempty"`
	// Lost lists the generations this assignment's restores could not
	// load, and what became of each (rebuilt, forgotten, unverified).
	Lost []LostGeneration `json:"lost_generations,omitempty"`
}

// ForwardLag is the part of Lag that waits to be forwarded.
func (p *PartitionStatus) ForwardLag() int64 { return max(p.Lag-p.FillLag, 0) }

// fillLag is the part of the input up to hwm that lies between next and
// resume: read into the filter only.
func fillLag(next, resume, hwm int64) int64 {
	if next < 0 {
		return 0
	}
	return max(min(resume, hwm)-next, 0)
}

// Progress of a long phase before a partition runs.
type Progress struct {
	// Phase: seeding (remembering input before a new group's start),
	// replaying (input between the checkpoint and the committed offset),
	// rebuilding (input read back into generations a restore lost) or
	// scanning (outputs for records written but not committed).
	Phase string `json:"phase"`
	// Topic is the topic read when it is not the input: the topic a new
	// memory is seeded from (Config.SeedTopic).
	Topic string `json:"topic,omitempty"`
	// From and To are the offsets of the phase's range; Done counts the
	// offsets passed so far (records and offsets that are not events).
	From int64 `json:"from_offset"`
	To   int64 `json:"to_offset"`
	Done int64 `json:"done"`
	// Keys counts the keys inserted into the filter during the phase.
	Keys       uint64  `json:"keys"`
	Rate       float64 `json:"rate_per_second"` // offsets per second since the phase began
	ETASeconds float64 `json:"eta_seconds"`     // remaining offsets / rate; 0 when unknown
}

// Fraction is the share of the range done, in [0, 1].
func (p *Progress) Fraction() float64 {
	if p == nil || p.To <= p.From {
		return 0
	}
	return min(1, max(0, float64(p.Done)/float64(p.To-p.From)))
}

// partitionStats are what a partition counts for its status: the records
// of its assignment by outcome, the rate it consumes them at, and its
// filter's statistics as last taken. The partition's goroutine owns them;
// they reach the status page through show and housekeeping.
type partitionStats struct {
	consumed, forwarded, duplicates, deadLettered, dropped uint64
	skippedMarkers, skippedAborted                         uint64

	// rateCount records were consumed since rateAt.
	rateCount uint64
	rateAt    time.Time
	// filter was taken at filterAt; filterStale: keys were inserted since.
	filter      FilterStats
	filterAt    time.Time
	filterStale bool
}

// add counts the records of a handled batch.
func (s *partitionStats) add(t *tally) {
	s.consumed += t.consumed
	s.forwarded += t.forwarded
	s.duplicates += t.duplicates
	s.skippedMarkers += uint64(t.markers)
	s.skippedAborted += uint64(t.aborted)
	for _, n := range t.deadLettered {
		s.deadLettered += n
	}
	for _, n := range t.dropped {
		s.dropped += n
	}
	s.rateCount += t.consumed
	if t.consumed+t.replayed > 0 {
		s.filterStale = true
	}
}

// show puts the counts on ps.
func (s *partitionStats) show(ps *PartitionStatus) {
	ps.Consumed, ps.Forwarded, ps.Duplicates, ps.DeadLettered, ps.Dropped =
		s.consumed, s.forwarded, s.duplicates, s.deadLettered, s.dropped
	ps.SkippedMarkers, ps.SkippedAborted = s.skippedMarkers, s.skippedAborted
}

// setFilter keeps the filter's statistics fs, taken at. They stay stale
// if keys came before: a recovery's statistics, taken after its replay,
// are refreshed once input stops (filterDue).
func (s *partitionStats) setFilter(fs FilterStats, at time.Time) {
	s.filter, s.filterAt = fs, at
}

// refreshFilter keeps the filter's statistics fs, taken at, as current.
func (s *partitionStats) refreshFilter(fs FilterStats, at time.Time) {
	s.filter, s.filterAt, s.filterStale = fs, at, false
}

// startRate begins counting the rate at.
func (s *partitionStats) startRate(at time.Time) { s.rateAt = at }

// rateDue reports whether a second passed since the rate was last taken.
func (s *partitionStats) rateDue(now time.Time) bool { return now.Sub(s.rateAt) >= time.Second }

// filterDue reports whether the filter's statistics are to be taken
// again. Stats may walk the filter: keep it rare. But do not show a
// filter without its first keys, or a backlog just worked off with the
// keys of its first seconds, for up to an interval: refresh at once when
// the first keys came, and when input stopped (a second without records)
// after keys came.
func (s *partitionStats) filterDue(now time.Time) bool {
	return now.Sub(s.filterAt) >= filterStatsInterval ||
		(s.filterStale && (s.filter.Generations == 0 || s.rateCount == 0))
}

// takeRate returns the records consumed per second since the rate was
// last taken, and starts counting again at now.
func (s *partitionStats) takeRate(now time.Time) float64 {
	rate := float64(s.rateCount) / now.Sub(s.rateAt).Seconds()
	s.rateCount, s.rateAt = 0, now
	return rate
}

// partitionStatus is a partition's status and what the stall watchdog
// (stuck.go) tracks about it, for one assignment.
type partitionStatus struct {
	PartitionStatus
	// base is the offset at assignment (-1: none committed), the position
	// until the first session knows better.
	base int64
	// recovered: a session of this assignment finished its recovery.
	recovered bool
	// Progress: the position passed maxNext, or a phase passed the most it
	// had done, at progressAt; lagSince is when input began to wait (zero
	// while none waits).
	maxNext              int64
	maxDone              map[string]int64
	progressAt, lagSince time.Time
	// reportedAt: when the watchdog last logged the stall (zero: not
	// stalled).
	reportedAt time.Time
}

// Status returns a copy of the current status.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	if !w.unjoinedSince.IsZero() {
		s.UnjoinedSeconds = w.deps.Now().Sub(w.unjoinedSince).Seconds()
	}
	if err := w.joinLog.LastError(); err != nil && !s.Joined {
		s.JoinError = w.joinErrorText(err)
	}
	s.Assigned = append([]int(nil), w.status.Assigned...)
	s.CrossPartition = w.crossPartitionStatus()
	s.PlannedFilterBytes = w.plannedPerPartition * uint64(len(s.Assigned))
	s.Partitions = make([]PartitionStatus, 0, len(w.parts))
	running := 0
	for _, p := range w.parts {
		ps := p.PartitionStatus
		ps.RecoverySeconds = ps.RecoveryDuration.Seconds()
		if ps.Progress != nil {
			pr := *ps.Progress
			ps.Progress = &pr
		}
		ps.Lost = slices.Clone(ps.Lost)
		s.Partitions = append(s.Partitions, ps)
		// A partition that recovered once counts as restored even while a
		// failure makes it recover again or it stalls: those show as
		// stalled (status, metric, alert), not as an unready pod that
		// Kubernetes would take out of service.
		// Partitions keep running across cooperative rebalances: what
		// counts is that they are assigned now.
		if p.recovered && slices.Contains(s.Assigned, p.Partition) {
			running++
		}
	}
	sort.Slice(s.Partitions, func(i, j int) bool { return s.Partitions[i].Partition < s.Partitions[j].Partition })
	s.Ready = s.Joined && running == len(s.Assigned)
	if errp := w.fatal.Load(); errp != nil {
		s.Error = (*errp).Error()
		s.Ready = false
	}
	return s
}

func (w *Worker) updatePartition(p int, f func(*PartitionStatus)) {
	w.mu.Lock()
	ps := w.parts[p]
	if ps == nil {
		ps = newPartitionStatus(w.deps.Now(), -1)
		w.parts[p] = ps
	}
	f(&ps.PartitionStatus)
	ps.track(w.deps.Now())
	w.mu.Unlock()
}

func newPartitionStatus(now time.Time, base int64) *partitionStatus {
	return &partitionStatus{base: base, maxNext: -1, progressAt: now,
		PartitionStatus: PartitionStatus{NextOffset: -1, ResumeOffset: -1, Committed: -1, LastCheckpointOffset: -1}}
}

// startPartitionStatus begins the status of a new assignment of p.
func (w *Worker) startPartitionStatus(p int, gen int32, base int64) {
	w.mu.Lock()
	ps := newPartitionStatus(w.deps.Now(), base)
	ps.Topic, ps.Partition, ps.Generation, ps.State = w.cfg.Input, p, gen, "restoring"
	w.parts[p] = ps
	w.mu.Unlock()
}

// partitionRecovered notes that a session of p's assignment recovered.
func (w *Worker) partitionRecovered(p int) {
	w.mu.Lock()
	if ps := w.parts[p]; ps != nil {
		ps.recovered = true
	}
	w.mu.Unlock()
}

func (w *Worker) removePartition(p int, gen int32) {
	w.mu.Lock()
	if ps := w.parts[p]; ps != nil && ps.Generation == gen {
		delete(w.parts, p)
		// The partition's gauges belong to its next owner (here under the
		// lock the stall watchdog sets them under).
		pm := w.m.partition(w.cfg.Input, p)
		pm.lag.Set(0)
		pm.stalled.Set(0)
		pm.stalledSeconds.Set(0)
	}
	w.mu.Unlock()
}

// Handler serves /metrics from g, /healthz (200 while the worker has not
// failed), /readyz (200 once joined and every assigned partition restored)
// and /status.json.
func (w *Worker) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if errp := w.fatal.Load(); errp != nil {
			http.Error(rw, (*errp).Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		s := w.Status()
		switch {
		case s.Error != "":
			http.Error(rw, "not ready: "+s.Error, http.StatusServiceUnavailable)
			return
		case s.Fenced != "":
			http.Error(rw, "not ready: idle after being fenced: "+s.Fenced, http.StatusServiceUnavailable)
			return
		case !s.Joined && s.JoinError != "":
			http.Error(rw, fmt.Sprintf("not ready: not in a consumer group generation for %.0fs; joining fails: %s",
				s.UnjoinedSeconds, s.JoinError), http.StatusServiceUnavailable)
			return
		case !s.Joined:
			http.Error(rw, fmt.Sprintf("not ready: not in a consumer group generation for %.0fs; waiting for the group coordinator to complete a rebalance",
				s.UnjoinedSeconds), http.StatusServiceUnavailable)
			return
		case !s.Ready:
			http.Error(rw, "not ready: restoring partitions", http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /status.json", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(w.Status())
	})
	return mux
}

// joinErrorText says why joining fails: for brokers that do not answer,
// which ones (the group's coordinator is one of them).
func (w *Worker) joinErrorText(err error) string {
	if brokercheck.Unreachable(err) {
		return fmt.Sprintf("no answer from the brokers (--brokers %s): %v", strings.Join(w.cfg.Brokers, ","), err)
	}
	return err.Error()
}
