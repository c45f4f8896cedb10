package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func collect(t *testing.T, cfg GenConfig) []Event {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for {
		ev, ok := g.Next()
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

func TestGroundTruth(t *testing.T) {
	for _, kind := range []string{KindOrder, KindURL} {
		cfg := GenConfig{Kind: kind, Count: 20000, Duplicates: 0.2, Seed: 7, StartTime: time.Unix(1_700_000_000, 0), TimeStep: time.Millisecond}
		evs := collect(t, cfg)
		if len(evs) != 20000 {
			t.Fatalf("%s: %d events", kind, len(evs))
		}
		seen := map[string]bool{}
		dups, adjacent, far := 0, 0, 0
		for i, ev := range evs {
			k := string(ev.Key)
			if ev.Duplicate != seen[k] {
				t.Fatalf("%s event %d: Duplicate=%v but key seen before=%v", kind, i, ev.Duplicate, seen[k])
			}
			if ev.Duplicate {
				dups++
				if ev.Adjacent {
					adjacent++
				}
			}
			seen[k] = true
			if want := cfg.StartTime.Add(time.Duration(i) * time.Millisecond); !ev.Time.Equal(want) {
				t.Fatalf("event %d time %v, want %v", i, ev.Time, want)
			}
		}
		if dups != 4000 || len(seen) != 16000 {
			t.Fatalf("%s: %d duplicates, %d unique; want exactly 4000 and 16000", kind, dups, len(seen))
		}
		far = dups - adjacent
		if adjacent < 1500 || far < 1500 {
			t.Fatalf("%s: %d adjacent, %d far duplicates: want both near half", kind, adjacent, far)
		}
	}
}

func TestFarDuplicatesReachFarBack(t *testing.T) {
	evs := collect(t, GenConfig{Count: 10000, Duplicates: 0.3, Seed: 1})
	first := map[string]int{}
	maxGap := 0
	for i, ev := range evs {
		if j, ok := first[string(ev.Key)]; ok {
			maxGap = max(maxGap, i-j)
		} else {
			first[string(ev.Key)] = i
		}
	}
	if maxGap < 5000 {
		t.Fatalf("largest distance to a first occurrence %d: far duplicates missing", maxGap)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := GenConfig{Kind: KindURL, Count: 2000, Duplicates: 0.25, Seed: 42, StartTime: time.Unix(0, 0), TimeStep: time.Second}
	a, b := collect(t, cfg), collect(t, cfg)
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) || a[i].Duplicate != b[i].Duplicate {
			t.Fatalf("event %d differs between two runs with one seed", i)
		}
	}
	cfg.Seed = 43
	c := collect(t, cfg)
	same := 0
	for i := range a {
		if bytes.Equal(a[i].Key, c[i].Key) {
			same++
		}
	}
	if same > len(a)/10 {
		t.Fatalf("%d of %d keys equal across seeds", same, len(a))
	}
}

func TestOrderEvents(t *testing.T) {
	ex, err := keys.NewExtractor("json:order_id", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	evs := collect(t, GenConfig{Count: 1000, Duplicates: 0.5, Seed: 3})
	for _, ev := range evs {
		k, err := ex.Extract(nil, nil, ev.Value, nil)
		if err != nil || !bytes.Equal(k, ev.Key) {
			t.Fatalf("json:order_id of %s = %q, %v; want %q", ev.Value, k, err, ev.Key)
		}
		var doc map[string]any
		if err := json.Unmarshal(ev.Value, &doc); err != nil {
			t.Fatalf("invalid JSON %s: %v", ev.Value, err)
		}
		total += len(ev.Value)
	}
	if avg := total / len(evs); avg < 170 || avg > 240 {
		t.Fatalf("average order value %d bytes, want about 200", avg)
	}
}

func TestURLSpellingsNormalizeToKey(t *testing.T) {
	ex, err := keys.NewExtractor("json:url", "url", 0)
	if err != nil {
		t.Fatal(err)
	}
	spellings := map[string]map[string]bool{}
	for _, ev := range collect(t, GenConfig{Kind: KindURL, Count: 5000, Duplicates: 0.5, Seed: 9}) {
		k, err := ex.Extract(nil, nil, ev.Value, nil)
		if err != nil || !bytes.Equal(k, ev.Key) {
			t.Fatalf("normalized %s = %q, %v; want %q", ev.Value, k, err, ev.Key)
		}
		var doc struct{ URL string }
		_ = json.Unmarshal(ev.Value, &doc)
		if spellings[string(ev.Key)] == nil {
			spellings[string(ev.Key)] = map[string]bool{}
		}
		spellings[string(ev.Key)][doc.URL] = true
	}
	varied := 0
	for _, s := range spellings {
		if len(s) > 1 {
			varied++
		}
	}
	if varied < 500 {
		t.Fatalf("only %d keys were written in more than one spelling", varied)
	}
}

func TestValidate(t *testing.T) {
	bad := []Config{
		{GenConfig: GenConfig{Count: 0}, Brokers: []string{"a:1"}, Topic: "t"},
		{GenConfig: GenConfig{Count: 10, Duplicates: 1}, Brokers: []string{"a:1"}, Topic: "t"},
		{GenConfig: GenConfig{Count: 10, Kind: "tweet"}, Brokers: []string{"a:1"}, Topic: "t"},
		{GenConfig: GenConfig{Count: 100, KeySpace: 10}, Brokers: []string{"a:1"}, Topic: "t"},
		{GenConfig: GenConfig{Count: 10}, Topic: "t"},
		{GenConfig: GenConfig{Count: 10}, Brokers: []string{"a:1"}},
		{GenConfig: GenConfig{Count: 10}, Brokers: []string{"a:1"}, Topic: "t", Rate: -1},
		{GenConfig: GenConfig{Count: 10}, Brokers: []string{"a:1"}, Topic: "t", Compression: "brotli"},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", c)
		}
	}
}

func TestSmallKeySpaceIsExhaustive(t *testing.T) {
	evs := collect(t, GenConfig{Count: 100, KeySpace: 100, Seed: 5})
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.KeyID >= 100 || seen[string(ev.Key)] {
			t.Fatalf("key %d out of range or repeated", ev.KeyID)
		}
		seen[string(ev.Key)] = true
	}
}

func TestRunAgainstBroker(t *testing.T) {
	b, err := broker.New(broker.Config{Topics: []broker.TopicSpec{{Name: "orders", Partitions: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress []Stats
	cfg := Config{
		GenConfig: GenConfig{Count: 5000, Duplicates: 0.2, Seed: 11},
		Brokers:   []string{b.Addr()}, Topic: "orders", BatchSize: 1000,
		Progress: func(s Stats) { progress = append(progress, s) }, ProgressInterval: time.Millisecond,
	}
	st, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Events != 5000 || st.Duplicates != 1000 || st.Unique != 4000 {
		t.Fatalf("stats %v", st)
	}
	if len(progress) == 0 || !progress[len(progress)-1].Done || progress[len(progress)-1].Events != 5000 {
		t.Fatalf("progress calls %v", progress)
	}

	// Read everything back: every key lives in one partition, the counts match.
	conn, err := kafka.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions("orders")
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	partitionOf := map[string]int{}
	events := 0
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: "orders", Partition: p.ID, MaxWait: 50 * time.Millisecond})
		last, err := kafka.DialLeader(ctx, "tcp", b.Addr(), "orders", p.ID)
		if err != nil {
			t.Fatal(err)
		}
		end, err := last.ReadLastOffset()
		last.Close()
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < end; off++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			events++
			if q, ok := partitionOf[string(m.Key)]; ok && q != p.ID {
				t.Fatalf("key %s in partitions %d and %d", m.Key, q, p.ID)
			}
			partitionOf[string(m.Key)] = p.ID
		}
		r.Close()
	}
	if events != 5000 || len(partitionOf) != 4000 {
		t.Fatalf("read back %d events with %d distinct keys, want 5000 and 4000", events, len(partitionOf))
	}
}

func TestRateLimit(t *testing.T) {
	b, err := broker.New(broker.Config{Topics: []broker.TopicSpec{{Name: "t", Partitions: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := Run(ctx, Config{GenConfig: GenConfig{Count: 1000}, Brokers: []string{b.Addr()}, Topic: "t", Rate: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if st.Elapsed < 400*time.Millisecond {
		t.Fatalf("1000 events at 2000/s took %v, want about 500ms", st.Elapsed)
	}
}

// TestCompression: with --compression the batches reach the broker in that
// codec (as a reader sees them: kgo reports each record's batch codec), and
// every event is there.
func TestCompression(t *testing.T) {
	codecs := []struct {
		name string
		kgo  uint8 // kgo.RecordAttrs.CompressionType
	}{{"none", 0}, {"gzip", 1}, {"snappy", 2}, {"lz4", 3}, {"zstd", 4}}
	var topics []broker.TopicSpec
	for _, c := range codecs {
		topics = append(topics, broker.TopicSpec{Name: "c-" + c.name, Partitions: 1})
	}
	b, err := broker.New(broker.Config{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range codecs {
		topic := "c-" + c.name
		cfg := Config{GenConfig: GenConfig{Count: 300, Seed: 3}, Brokers: []string{b.Addr()}, Topic: topic, BatchSize: 100, Compression: c.name}
		if _, err := Run(ctx, cfg); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for n < 300 && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				n++
				if got := r.Attrs.CompressionType(); got != c.kgo {
					t.Errorf("%s: record %d in a batch of codec %d, want %d", c.name, r.Offset, got, c.kgo)
				}
			})
		}
		cl.Close()
		if n != 300 {
			t.Errorf("%s: read %d events back, want 300", c.name, n)
		}
	}
}
