package worker

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus series. Per-partition series are
// created (at 0) when the worker takes the partition; its gauges are
// deleted when it gives it up.
type metrics struct {
	consumed     *prometheus.CounterVec
	forwarded    *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	dropped      *prometheus.CounterVec

	filterBytes    *prometheus.GaugeVec
	filterFill     *prometheus.GaugeVec
	filterFPR      *prometheus.GaugeVec
	filterKeys     *prometheus.GaugeVec
	filterGens     *prometheus.GaugeVec
	filterOverflow *prometheus.GaugeVec
	filterClamped  *prometheus.GaugeVec

	replayed         *prometheus.CounterVec
	alreadyWritten   *prometheus.CounterVec
	recoveryDuration *prometheus.HistogramVec
	lag              *prometheus.GaugeVec
	lsoLag           *prometheus.GaugeVec
	stalled          *prometheus.GaugeVec
	stalledSeconds   *prometheus.GaugeVec
	remaining        *prometheus.GaugeVec
	skipped          *prometheus.CounterVec
	rebalances       prometheus.Counter
	groupJoined      prometheus.Gauge
	groupUnjoined    prometheus.Gauge
	groupRebuilds    prometheus.Counter
	commitFailures   prometheus.Counter
	writeFailures    *prometheus.CounterVec
	writeRetries     *prometheus.CounterVec
	foreign          *prometheus.CounterVec
	inputResets      *prometheus.CounterVec
	inputLost        *prometheus.CounterVec
	// settingsConflicts: members of the group whose settings differ.
	settingsConflicts prometheus.Gauge
	// foreignMembers, unprocessedPartitions, assignmentsRefused: the
	// group's members that are not bloomgate workers, the input
	// partitions no agreeing member processes, lying leaders.
	foreignMembers        prometheus.Gauge
	unprocessedPartitions *prometheus.GaugeVec
	unprocessedLag        *prometheus.GaugeVec
	assignmentsRefused    prometheus.Counter
	// crossRepeats: sampled keys met in two partitions (crosspartition.go).
	crossRepeats      *prometheus.CounterVec
	generationsLost   *prometheus.CounterVec
	restoresDiscarded *prometheus.CounterVec
}

// newMetrics creates the worker's series and registers them with reg. It
// is over 80 lines on purpose: one table of every series' name and help,
// read and checked (TestMetricNamesExported) in one place; its complexity
// is that of a list.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	pl := []string{"topic", "partition"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bloomgate", Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "bloomgate", Name: name, Help: help}, pl)
	}
	m := &metrics{
		consumed:   counter("records_consumed_total", "Input records processed (each ends as exactly one of forwarded, duplicate, dead-lettered, dropped).", pl...),
		forwarded:  counter("records_forwarded_total", "Records written to the output topic.", pl...),
		duplicates: counter("records_duplicates_total", "Records judged duplicate (written to the duplicates topic when configured, else discarded).", pl...),
		deadLettered: counter("records_dead_lettered_total", "Records written to the dead-letter topic: their key could not be extracted (key reasons), "+
			"or the topic they were meant for refused them (record_too_large, invalid_record, invalid_timestamp, corrupt_record; --on-unwritable).", "topic", "partition", "reason"),
		dropped: counter("records_dropped_total", "Records dropped by policy: their key could not be extracted (--on-missing-key drop), "+
			"or the topic they were meant for refused them (--on-unwritable drop).", "topic", "partition", "reason"),
		filterBytes:    gauge("filter_bytes", "Memory held by the partition's filter."),
		filterFill:     gauge("filter_fill_ratio", "Fill ratio of the newest filter generation."),
		filterFPR:      gauge("filter_estimated_fpr", "Estimated current false-positive rate of the partition's filter."),
		filterKeys:     gauge("filter_estimated_keys", "Estimated distinct keys in the partition's filter."),
		filterGens:     gauge("filter_generations", "Generations in the partition's filter ring."),
		filterOverflow: gauge("filter_overflow_stacks", "Overflow sub-filters stacked because a generation outgrew its planned capacity."),
		filterClamped: gauge("filter_clamped_timestamps", "Records (since this worker took the partition) stamped more than --max-time-jump ahead of the "+
			"partition's event time, filed at the bound instead: a producer clock running ahead."),
		replayed: counter("recovery_replayed_records_total", "Input records replayed into the filter (without forwarding) during recovery.", pl...),
		alreadyWritten: counter("recovery_already_written_records_total",
			"Records the recovery scan found written but not committed (not written again).", pl...),
		recoveryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "bloomgate", Name: "recovery_duration_seconds",
			Help:    "Time from assignment to resumed processing: restore, replay, output scan.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"topic"}),
		lag: gauge("consumer_lag", "Records between the partition's high-water mark and the next offset to process."),
		stalled: gauge("partition_stalled", "1 while the partition is stalled: input waits beyond its position and the position has not moved "+
			"for 2 minutes (failing writes, restore or fetches), or it waits before a record its output refuses (--on-unwritable stall); else 0."),
		stalledSeconds: gauge("partition_stalled_seconds", "Seconds input has waited beyond the partition's position without progress (0 while it progresses or has nothing to read)."),
		lsoLag: gauge("partition_lso_lag", "Offsets between the partition's high-water mark and its last stable offset: "+
			"held back by open transactions of upstream producers (read_committed stops at the last stable offset). 0 at read_uncommitted."),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "recovery_remaining_offsets",
			Help: "Offsets left in a phase before the partition runs: phase=seeding (input remembered before a new group's start, not forwarded), " +
				"replaying (input between the checkpoint and the committed offset), rebuilding (input read back into generations a restore lost), " +
				"scanning (written records looked up by the recovery scan). 0 outside the phase."},
			[]string{"topic", "partition", "phase"}),
		skipped: counter("records_skipped_total", "Input offsets passed over without being events: transaction markers (reason=marker) "+
			"and records of aborted transactions (reason=aborted, read_committed only). Not part of records_consumed_total.", "topic", "partition", "reason"),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "rebalances_total",
			Help: "Consumer group generations joined."}),
		groupJoined: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_joined",
			Help: "1 while the worker is a member of a consumer group generation, else 0 (joining, syncing, or between generations)."}),
		groupUnjoined: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_unjoined_seconds",
			Help: "Seconds since the worker last was in a consumer group generation (0 while it is); a healthy rebalance stays below the rebalance timeout."}),
		groupRebuilds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "group_rebuilds_total",
			Help: "Times the worker dropped its consumer group membership and joined afresh because no generation formed for too long."}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "offset_commit_failures_total",
			Help: "Failed offset commits."}),
		writeFailures: counter("output_write_failures_total", "Failed output writes (each followed by an exact recovery of the partition).", pl...),
		writeRetries: counter("output_write_retries_total", "Produce requests sent again because the broker's answer proved that nothing landed "+
			"(the partition's leader moved: not_leader, unknown_partition, leader_epoch, no_leader); "+
			"the metadata is refreshed first, and no recovery follows.", "topic", "reason"),
		foreign: counter("foreign_records_total", "Records of other writers met by recovery scans in the written topics (topic), by reason: "+
			"no_headers, unauthenticated (src headers without provenance), other_group, other_memory, invalid_mac, malformed. "+
			"Ignored: they never count as written by this worker.", "topic", "reason"),
		inputResets: counter("input_resets_total", "Recoveries that found the input's log not as the memory knew it, by reason: "+
			"recreated (another log: read from its start, memory kept), truncated (cut short: resumed at its end), "+
			"retention (committed offset below the log start: records deleted before they were processed).", "topic", "reason"),
		inputLost: counter("input_offsets_lost_total", "Input offsets deleted by retention before the worker processed them (lost upstream).", "topic"),
		settingsConflicts: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_settings_conflicts",
			Help: "Members of the consumer group whose filter, key or output settings differ from this worker's (as of the last generation joined); " +
				"the group leader assigns partitions only to members that agree with it."}),
		foreignMembers: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_foreign_members",
			Help: "Members of the consumer group that are not bloomgate workers (they announce no bloomgate settings: kcat -G, a console " +
				"consumer, another client using the group id), as of the last generation joined. A bloomgate leader gives them nothing; " +
				"what one holds as the leader is consumed and committed without deduplication."}),
		unprocessedPartitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_unprocessed_partitions",
			Help: "Input partitions that no bloomgate member agreeing with this worker processes in the group's current generation " +
				"(held by a foreign member, or left unassigned), as of the last generation joined."}, []string{"topic"}),
		unprocessedLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "bloomgate", Name: "group_unprocessed_lag",
			Help: "Records waiting in the input partitions of bloomgate_group_unprocessed_partitions: their high-water marks minus " +
				"the group's committed offsets (refreshed with the stall watchdog); part of the group's lag that no bloomgate_consumer_lag shows."},
			[]string{"topic"}),
		assignmentsRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "group_assignments_refused_total",
			Help: "Assignments from the group's leader that this worker refused in part: partitions of another topic, that the input " +
				"does not have, or listed twice. Only the valid partitions run."}),
		crossRepeats: counter("cross_partition_repeats_total", "Sampled keys (1 in 64, by a hash of the key) met again in another "+
			"partition of the input than the one they were last seen in: the input is not keyed by the dedup key, and such repeats "+
			"are forwarded as new (deduplication is per partition). Fix: --repartition, or producers keyed by the dedup key.", "topic"),
		generationsLost: counter("checkpoint_generations_lost_total",
			"Filter generations a restore could not load (a corrupt or missing checkpoint object), by what became of them: reason=rebuilt "+
				"(read back from the input, nothing forgotten), forgotten (the input no longer holds their keys: repeats are forwarded "+
				"until they would have left the window), unverified (exact mode: their exact store was lost, the filter's answer stands).",
			"topic", "reason"),
		restoresDiscarded: counter("checkpoint_restores_discarded_total",
			"Partitions started with an empty filter by --on-restore-failure empty because their checkpoints exist but none loads "+
				"(corrupt, or written with other key or filter settings): their memory is rebuilt from the retained input, and keys "+
				"older than it are forgotten. Should stay 0 once the rebuild the setting was set for is done.", "topic"),
	}
	for _, c := range []prometheus.Collector{m.consumed, m.forwarded, m.duplicates, m.deadLettered, m.dropped,
		m.filterBytes, m.filterFill, m.filterFPR, m.filterKeys, m.filterGens, m.filterOverflow, m.filterClamped,
		m.replayed, m.alreadyWritten, m.recoveryDuration, m.lag, m.lsoLag, m.stalled, m.stalledSeconds, m.remaining, m.skipped, m.rebalances, m.groupJoined, m.groupUnjoined, m.groupRebuilds,
		m.commitFailures, m.writeFailures, m.writeRetries, m.foreign, m.inputResets, m.inputLost, m.settingsConflicts, m.foreignMembers, m.unprocessedPartitions, m.unprocessedLag, m.assignmentsRefused, m.crossRepeats, m.generationsLost, m.restoresDiscarded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering worker metrics: %w", err)
		}
	}
	return m, nil
}

// forgetPartition deletes the gauges of partition p of topic: the worker
// gave it up, and a gauge left behind would freeze at its last value (a
// lag of 0 while records wait for the next owner, filter bytes counted
// twice). Counters stay: they total what this process did.
func (m *metrics) forgetPartition(topic string, p int) {
	labels := prometheus.Labels{"topic": topic, "partition": strconv.Itoa(p)}
	for _, g := range []*prometheus.GaugeVec{m.filterBytes, m.filterFill, m.filterFPR, m.filterKeys, m.filterGens, m.filterOverflow,
		m.filterClamped, m.lag, m.lsoLag, m.stalled, m.stalledSeconds, m.remaining} {
		g.DeletePartialMatch(labels)
	}
}

// partitionMetrics are the resolved series of one partition, so that the hot
// path does no label lookups.
type partitionMetrics struct {
	consumed, forwarded, duplicates, replayed, writeFailures, alreadyWritten prometheus.Counter
	deadLettered, dropped                                                    map[string]prometheus.Counter
	lag, lsoLag, stalled, stalledSeconds                                     prometheus.Gauge
	remaining                                                                map[string]prometheus.Gauge // by phase
	skippedMarkers, skippedAborted                                           prometheus.Counter
	bytes, fill, fpr, keys, gens, overflow, clamped                          prometheus.Gauge
	lost                                                                     map[string]prometheus.Counter // by outcome (topic-wide)
}

// lostOutcomes label bloomgate_checkpoint_generations_lost_total.
var lostOutcomes = []string{LostRebuilt, LostForgotten, LostUnverified}

func (m *metrics) partition(topic string, p int) *partitionMetrics {
	ps := strconv.Itoa(p)
	pm := &partitionMetrics{
		consumed:       m.consumed.WithLabelValues(topic, ps),
		forwarded:      m.forwarded.WithLabelValues(topic, ps),
		duplicates:     m.duplicates.WithLabelValues(topic, ps),
		replayed:       m.replayed.WithLabelValues(topic, ps),
		alreadyWritten: m.alreadyWritten.WithLabelValues(topic, ps),
		writeFailures:  m.writeFailures.WithLabelValues(topic, ps),
		remaining:      map[string]prometheus.Gauge{},
		deadLettered:   map[string]prometheus.Counter{},
		dropped:        map[string]prometheus.Counter{},
		lag:            m.lag.WithLabelValues(topic, ps),
		lsoLag:         m.lsoLag.WithLabelValues(topic, ps),
		stalled:        m.stalled.WithLabelValues(topic, ps),
		stalledSeconds: m.stalledSeconds.WithLabelValues(topic, ps),
		skippedMarkers: m.skipped.WithLabelValues(topic, ps, "marker"),
		skippedAborted: m.skipped.WithLabelValues(topic, ps, "aborted"),
		bytes:          m.filterBytes.WithLabelValues(topic, ps),
		fill:           m.filterFill.WithLabelValues(topic, ps),
		fpr:            m.filterFPR.WithLabelValues(topic, ps),
		keys:           m.filterKeys.WithLabelValues(topic, ps),
		gens:           m.filterGens.WithLabelValues(topic, ps),
		overflow:       m.filterOverflow.WithLabelValues(topic, ps),
		clamped:        m.filterClamped.WithLabelValues(topic, ps),
	}
	for _, ph := range phases {
		pm.remaining[ph] = m.remaining.WithLabelValues(topic, ps, ph)
	}
	pm.lost = map[string]prometheus.Counter{}
	for _, o := range lostOutcomes {
		pm.lost[o] = m.generationsLost.WithLabelValues(topic, o)
	}
	for _, reasons := range [][]string{KeyReasons, UnwritableReasons} {
		for _, r := range reasons {
			pm.deadLettered[r] = m.deadLettered.WithLabelValues(topic, ps, r)
			pm.dropped[r] = m.dropped.WithLabelValues(topic, ps, r)
		}
	}
	return pm
}

func (pm *partitionMetrics) setFilter(s FilterStats) {
	pm.bytes.Set(float64(s.Bytes))
	pm.fill.Set(s.Fill)
	pm.fpr.Set(s.EstFPR)
	pm.keys.Set(float64(s.EstKeys))
	pm.gens.Set(float64(s.Generations))
	pm.overflow.Set(float64(s.OverflowStacks))
	pm.clamped.Set(float64(s.ClampedTimestamps))
}
