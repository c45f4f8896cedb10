package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/segmentio/kafka-go"
)

func validConfig() Config {
	return Config{
		Brokers: []string{"127.0.0.1:9092"}, Input: "in", Output: "out",
		Filter: FilterParams{Window: time.Hour, Generations: 4, Capacity: 1000, FPR: 0.01},
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring naming the setting; "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "brokers"},
		{"broker without port", func(c *Config) { c.Brokers = []string{"localhost"} }, "brokers"},
		{"no input", func(c *Config) { c.Input = "" }, "input"},
		{"no output", func(c *Config) { c.Output = "" }, "output"},
		{"input equals output", func(c *Config) { c.Output = "in" }, "output: topic \"in\" is already used as input"},
		{"duplicates equals output", func(c *Config) { c.Duplicates = "out" }, "duplicates"},
		{"dead-letter policy without topic", func(c *Config) { c.OnMissingKey = MissingKeyDeadLetter }, "on-missing-key"},
		{"unknown policy", func(c *Config) { c.OnMissingKey = "ignore" }, "on-missing-key"},
		{"unwritable to a dead-letter topic that is not set", func(c *Config) { c.OnUnwritable = UnwritableDeadLetter }, "on-unwritable"},
		{"unknown unwritable policy", func(c *Config) { c.OnUnwritable = "fail" }, "on-unwritable"},
		{"unknown partitioning", func(c *Config) { c.Partitioning = "random" }, "partitioning"},
		{"unknown restore policy", func(c *Config) { c.OnRestoreFailure = "guess" }, "on-restore-failure"},
		// The filter's settings are checked by filterplan, whose words
		// these are.
		{"zero window", func(c *Config) { c.Filter.Window = 0 }, "window: 0s: must be positive (e.g. 24h)"},
		{"one generation", func(c *Config) { c.Filter.Generations = 1 }, "generations"},
		{"zero capacity", func(c *Config) { c.Filter.Capacity = 0 }, "capacity"},
		{"fpr 1", func(c *Config) { c.Filter.FPR = 1 }, "fpr"},
		{"negative timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "shutdown-timeout"},
		{"staleness below interval", func(c *Config) {
			c.CheckpointInterval, c.MaxCheckpointStaleness = time.Minute, time.Second
		}, "max-checkpoint-staleness"},
		{"huge batch", func(c *Config) { c.BatchSize = 10_000_000 }, "batch-size"},
		{"largest batch", func(c *Config) { c.BatchSize = MaxBatchSize }, ""},
		{"too many generations", func(c *Config) { c.Filter.Generations = filterplan.MaxGenerations + 1 }, "generations"},
		{"generation span below 1s", func(c *Config) { c.Filter.Window = 2 * time.Second }, "window"},
		{"staleness off", func(c *Config) { c.MaxCheckpointStaleness = NoBound }, ""},
		{"staleness below the default interval", func(c *Config) { c.MaxCheckpointStaleness = 30 * time.Second }, "max-checkpoint-staleness"},
		{"heartbeat at the session timeout", func(c *Config) { c.SessionTimeout, c.HeartbeatInterval = time.Second, time.Second }, "heartbeat-interval"},
		{"heartbeat above the default session timeout", func(c *Config) { c.HeartbeatInterval = time.Minute }, "heartbeat-interval"},
		{"rebalance below the default session timeout", func(c *Config) { c.RebalanceTimeout = 5 * time.Second }, "rebalance-timeout"},
		{"tiny batch bytes", func(c *Config) { c.MaxBatchBytes = 100 }, "max-batch-bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
			if _, err := New(c, Deps{State: newMemStore(), Extractor: keyExtractor{}}); err == nil {
				t.Fatalf("New accepted an invalid config")
			}
		})
	}
}

// TestCheckBatchSettings: the ranges of BatchSize and MaxBatchBytes, which
// `bloomgate run` checks with the same functions, end where documented.
func TestCheckBatchSettings(t *testing.T) {
	for _, n := range []int{1, MaxBatchSize} {
		if err := CheckBatchSize(n); err != nil {
			t.Errorf("batch size %d: %v", n, err)
		}
	}
	for _, n := range []int{0, MaxBatchSize + 1} {
		if err := CheckBatchSize(n); err == nil {
			t.Errorf("batch size %d accepted", n)
		}
	}
	for _, n := range []int64{MinBatchBytes, LargestBatchBytes} {
		if err := CheckMaxBatchBytes(n); err != nil {
			t.Errorf("max batch bytes %d: %v", n, err)
		}
	}
	for _, n := range []int64{-1, MinBatchBytes - 1, LargestBatchBytes + 1} {
		if err := CheckMaxBatchBytes(n); err == nil {
			t.Errorf("max batch bytes %d accepted", n)
		}
	}
	if got, want := fmt.Sprint(CheckBatchSize(0)), "0: must be at least 1 and at most 1M (e.g. 10000)"; got != want {
		t.Errorf("batch size 0: %q, want %q", got, want)
	}
}

// TestWithDefaults: every zero setting takes its documented default,
// set ones are kept, and the receiver is left alone.
func TestWithDefaults(t *testing.T) {
	c := validConfig()
	before := fmt.Sprintf("%+v", c)
	d := c.WithDefaults()
	if after := fmt.Sprintf("%+v", c); after != before {
		t.Fatalf("WithDefaults changed its receiver:\n%s\n%s", before, after)
	}
	got := []any{d.Group, d.OnMissingKey, d.OnUnwritable, d.Partitioning, d.IsolationLevel, d.OnRestoreFailure,
		d.BatchSize, d.MaxBatchBytes, d.BatchTimeout, d.CommitInterval, d.WriteTimeout, d.ShutdownTimeout,
		d.CheckpointInterval, d.MaxCheckpointStaleness, d.CheckpointTimeout,
		d.SessionTimeout, d.HeartbeatInterval, d.JoinGroupBackoff, d.RebalanceTimeout, d.Dialer.Timeout}
	want := []any{DefaultGroup, MissingKeyForward, UnwritableStall, PartitioningSame, ReadCommitted, RestoreFail,
		DefaultBatchSize, int64(DefaultMaxBatchBytes), DefaultBatchTimeout, DefaultCommitInterval, DefaultWriteTimeout, DefaultShutdownTimeout,
		DefaultCheckpointInterval, DefaultMaxCheckpointStaleness, 2 * time.Minute,
		DefaultSessionTimeout, DefaultHeartbeatInterval, DefaultJoinGroupBackoff, DefaultSessionTimeout + 10*time.Second, DefaultDialTimeout}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("defaults\n got %v\nwant %v", got, want)
	}
	if d.Owner == "" || d.Transport == nil {
		t.Errorf("owner %q, transport %v: want host/pid and a transport", d.Owner, d.Transport)
	}
	if d.MaxReplay != 0 {
		t.Errorf("max-replay %d, want 0 (no bound)", d.MaxReplay)
	}

	c.DeadLetter, c.CheckpointInterval, c.SessionTimeout = "dlq", 5*time.Minute, time.Minute
	d = c.WithDefaults()
	if d.OnMissingKey != MissingKeyDeadLetter || d.OnUnwritable != UnwritableDeadLetter || d.MaxCheckpointStaleness != 50*time.Minute ||
		d.CheckpointTimeout != 5*time.Minute || d.RebalanceTimeout != 70*time.Second {
		t.Errorf("derived defaults: on-missing-key %s, on-unwritable %s, staleness %v, checkpoint timeout %v, rebalance timeout %v",
			d.OnMissingKey, d.OnUnwritable, d.MaxCheckpointStaleness, d.CheckpointTimeout, d.RebalanceTimeout)
	}
	c.MaxCheckpointStaleness = NoBound
	if d = c.WithDefaults(); d.MaxCheckpointStaleness != NoBound {
		t.Errorf("NoBound became %v", d.MaxCheckpointStaleness)
	}
}

func TestPartitionParams(t *testing.T) {
	c := validConfig()
	c.Filter.Capacity = 1001
	if got := c.partitionParams(4).Capacity; got != 251 {
		t.Errorf("capacity per partition = %d, want 251 (rounded up)", got)
	}
}

func TestTargetPartition(t *testing.T) {
	for _, c := range []struct{ src, n, want int }{{0, 4, 0}, {3, 4, 3}, {6, 4, 2}, {5, 1, 0}} {
		if got := targetPartition(c.src, c.n); got != c.want {
			t.Errorf("input partition %d of a topic of %d: partition %d, want %d", c.src, c.n, got, c.want)
		}
	}
	h := &balancer{mode: PartitioningHash}
	m := kafka.Message{Key: []byte("order-1")}
	if a, b := h.hash.Balance(m, 0, 1, 2, 3), h.hash.Balance(m, 0, 1, 2, 3); a != b {
		t.Errorf("hash balancer not deterministic: %d vs %d", a, b)
	}
}

// TestRecordBuilderHeaders: a built record keeps the input's key, headers
// and timestamp, and gains one header naming its input partition and
// offset.
func TestRecordBuilderHeaders(t *testing.T) {
	var b recordBuilder
	b.reset(7, testProvenance(7), false)
	for i := 0; i < 100; i++ { // grow the arena across reallocations
		in := kafka.Message{Offset: int64(12345 + i), Key: []byte("k"), Value: []byte("v"), Time: time.Unix(100, 0),
			Headers: []kafka.Header{{Key: "trace", Value: []byte("abc")}}}
		b.add("out", &in, "")
	}
	for i := range b.recs {
		m := b.message(i)
		p, o, ok := SourceOf(m.Headers)
		if !ok || p != 7 || o != int64(12345+i) {
			t.Fatalf("record %d: src = %d/%d/%v, want 7/%d", i, p, o, ok, 12345+i)
		}
		if len(m.Headers) != 2 || headerValue(m.Headers, "trace") != "abc" || string(m.Key) != "k" || !m.Time.Equal(time.Unix(100, 0)) {
			t.Fatalf("record %d: want the input's key, header and timestamp and one header added: %+v", i, m)
		}
	}
	if _, _, ok := SourceOf([]kafka.Header{{Key: HeaderSrcOffset, Value: []byte("1")}}); ok {
		t.Errorf("SourceOf accepted a record without partition header")
	}
}

// TestStalenessNoBound: with MaxCheckpointStaleness NoBound (what
// `bloomgate run --max-checkpoint-staleness 0s` passes) and every
// checkpoint failing, offset commits go on: nothing pauses them.
func TestStalenessNoBound(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 1)
	evs := genEvents(1000, 1, 0.2, 29, base)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.CheckpointInterval = 50 * time.Millisecond
	cfg.MaxCheckpointStaleness = NoBound
	cfg.CommitInterval = 20 * time.Millisecond
	rw := startWorker(t, cfg, store, nil)
	failAfterInitialCheckpoint(t, store, 1)
	initial := store.commits.Load()
	produce(t, brokers, evs[:500])
	waitFor(t, 60*time.Second, "first part consumed", func() bool { return rw.consumed() == 500 })
	waitFor(t, 60*time.Second, "checkpoints failing", func() bool { return store.failed.Load() >= 2 })
	produce(t, brokers, evs[500:])
	waitFor(t, 60*time.Second, "every record committed with every checkpoint failing", func() bool {
		c := &kafka.Client{Addr: kafka.TCP(brokers...)}
		res, err := c.OffsetFetch(t.Context(), &kafka.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{tIn: {0}}})
		return err == nil && len(res.Topics[tIn]) == 1 && res.Topics[tIn][0].CommittedOffset == int64(len(evs))
	})
	for _, p := range rw.w.Status().Partitions {
		if p.CommitsPaused {
			t.Errorf("partition %d: commits paused without a staleness bound", p.Partition)
		}
	}
	if n := store.commits.Load() - initial; n != 0 {
		t.Errorf("%d checkpoints succeeded after the initial one; the test needs all of them to fail", n)
	}
	rw.stop(t)
}

// TestGroupTimingsFromGroup: the worker's group timings are group's, one
// set of defaults (the heartbeat default of the worker and of the group
// engine used to differ).
func TestGroupTimingsFromGroup(t *testing.T) {
	for _, session := range []time.Duration{0, 2 * time.Second, 45 * time.Second} {
		c := validConfig()
		c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval = session, 0, 0
		c = c.WithDefaults()
		s, r, h := group.Timings(session, 0, 0)
		if c.SessionTimeout != s || c.RebalanceTimeout != r || c.HeartbeatInterval != h {
			t.Errorf("session %v: worker %v/%v/%v, group %v/%v/%v", session, c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval, s, r, h)
		}
		if c.sessionTimeout() != s || c.rebalanceTimeout() != r {
			t.Errorf("session %v: liveness timings %v/%v", session, c.sessionTimeout(), c.rebalanceTimeout())
		}
	}
}
