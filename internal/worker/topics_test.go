package worker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func newClusterWith(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.Ports(0), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// TestTopicChecks: missing topics, unequal partition counts in same mode
// and a filter plan too large for one partition fail Run at start with
// errors naming the flag, the topic and the fix.
func TestTopicChecks(t *testing.T) {
	t.Parallel()
	brokers := newClusterWith(t, kfake.SeedTopics(4, tIn), kfake.SeedTopics(3, tOut))
	noSide := func(c *Config) { c.Duplicates, c.DeadLetter = "", "" }
	cases := []struct {
		name string
		cfg  func(*Config)
		want []string
	}{
		{"unequal partitions", noSide, []string{
			`--partitioning same needs equal partition counts: --input "in" has 4, --output "out" has 3; give the output 4 partitions or set --partitioning hash`}},
		{"missing output", func(c *Config) { noSide(c); c.Output = "outx" }, []string{
			`--output topic "outx" does not exist: create it with 4 partitions (as many as --input "in" has, which --partitioning same needs), ` +
				`e.g. kafka-topics.sh --bootstrap-server ` + brokers[0] + ` --create --topic outx --partitions 4 (the embedded ` + "`bloomgate broker`" + `: --topic outx:4 at its start; kcat cannot create topics), or fix --output`}},
		{"missing duplicates and dead-letter topics", func(c *Config) {
			c.Partitioning, c.Duplicates, c.DeadLetter = PartitioningHash, "nope", "dlqx"
		}, []string{
			`--duplicates topic "nope" does not exist: create it with 4 partitions (as many as --input "in" has), e.g. kafka-topics.sh --bootstrap-server ` + brokers[0] + ` --create --topic nope --partitions 4 (the embedded ` + "`bloomgate broker`" + `: --topic nope:4 at its start; kcat cannot create topics), or fix --duplicates`,
			`; --dead-letter topic "dlqx" does not exist`}},
		{"missing input and output", func(c *Config) { noSide(c); c.Input, c.Output = "inx", "outx" }, []string{
			`--input topic "inx" does not exist: check the name (topics are case-sensitive) or create it; ` +
				`--output topic "outx" does not exist: create it with as many partitions as the input, or fix --output`,
		}},
		{"filter too large for a partition", func(c *Config) {
			noSide(c)
			c.Partitioning, c.Filter.Capacity = PartitioningHash, 200e9
		}, []string{
			`--capacity 200000000000 over the 4 partitions of "in" is 50000000000 keys per window and partition: ` +
				`a filter of 50000000000 keys; this store's limit is 1000000000; lower --capacity, raise --fpr or give the input more partitions`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(brokers)
			tc.cfg(&cfg)
			w, err := New(cfg, Deps{State: planningStore{newMemStore(), 1e9}, Extractor: keyExtractor{}})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = w.Run(ctx)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Run = %v\nwant an error containing %s", err, want)
				}
			}
			if !errors.Is(err, ErrTopicConfig) {
				t.Fatalf("Run = %v, want it marked ErrTopicConfig (a configuration error, exit code 2)", err)
			}
		})
	}
}

// TestHashPartitioningCrash: hash mode with an output of another partition
// count; a crash forces the recovery scan over every output partition.
func TestHashPartitioningCrash(t *testing.T) {
	t.Parallel()
	brokers := newClusterWith(t, kfake.SeedTopics(4, tIn), kfake.SeedTopics(3, tOut, tDup, tDLQ))
	evs := genEvents(2000, 4, 0.3, 31, base)
	produce(t, brokers, evs)
	store := newMemStore()
	cfg := testConfig(brokers)
	cfg.Partitioning = PartitioningHash
	cfg.BatchSize = 40
	cfg.CommitInterval = 30 * time.Millisecond
	cfg.CheckpointInterval = 70 * time.Millisecond
	var batches atomic.Int64
	crash := make(chan struct{})
	a := startWorker(t, cfg, store, func(w *Worker) {
		w.hooks.AfterWrite = func(int, int64) {
			if batches.Add(1) == 25 {
				w.hooks.Halted.Store(true)
				close(crash)
			}
		}
	})
	go func() { <-crash; a.cancel() }()
	<-a.done
	a.done <- nil
	cfg.Owner = "successor"
	b := startWorker(t, cfg, store, nil)
	waitFor(t, 60*time.Second, "successor consumed everything", func() bool {
		s := b.w.Status()
		var next int64
		for _, p := range s.Partitions {
			next += p.NextOffset
		}
		return s.Ready && next == int64(len(evs))
	})
	b.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeySet(t, "output", readTopic(t, brokers, tOut, 3), wantOut)
	checkKeySet(t, "duplicates", readTopic(t, brokers, tDup, 3), wantDup)
}

// checkKeySet compares the multiset of keys regardless of partition.
func checkKeySet(t *testing.T, what string, got map[int][]kafka.Message, want map[int][]string) {
	t.Helper()
	var g, w []string
	for _, ms := range got {
		for _, m := range ms {
			g = append(g, string(m.Key))
		}
	}
	for _, ks := range want {
		w = append(w, ks...)
	}
	sort.Strings(g)
	sort.Strings(w)
	if strings.Join(g, ",") != strings.Join(w, ",") {
		t.Errorf("%s: %d records, want %d (key sets differ)", what, len(g), len(w))
	}
}

// TestHTTPHandler: /healthz, /readyz, /metrics, /status.json.
func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 2)
	reg := prometheus.NewRegistry()
	w, err := New(testConfig(brokers), Deps{Registerer: reg, State: newMemStore(), Extractor: keyExtractor{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler(reg))
	defer srv.Close()
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run = %d, want 503", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 30*time.Second, "ready", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`bloomgate_records_consumed_total{partition="1",topic="in"} 0`,
		`bloomgate_records_dead_lettered_total{partition="0",reason="null_key",topic="in"} 0`,
		`bloomgate_rebalances_total 1`,
		`bloomgate_consumer_lag{partition="0",topic="in"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if _, body := get("/status.json"); !strings.Contains(body, `"ready": true`) || !strings.Contains(body, `"state": "running"`) {
		t.Errorf("/status.json = %s", body)
	}
}
