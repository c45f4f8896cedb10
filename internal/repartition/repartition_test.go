package repartition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/keys"
)

// TestCopiesLandTogether: URL events keyed by whatever the fetcher chose,
// spread over the input's partitions, come out of the hop with every
// spelling of one canonical URL in one partition, under one key, value,
// headers and timestamp unchanged, origin named in headers; a record
// without a usable key comes out with a null key and the reason.
func TestCopiesLandTogether(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()

	spellings := func(i int) []string {
		return []string{
			fmt.Sprintf("http://Example.com/page/%d", i),
			fmt.Sprintf("http://example.com:80/page/%d#top", i),
			fmt.Sprintf("HTTP://example.com/./page/%d", i),
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []*kgo.Record
	ts := time.UnixMilli(1_780_000_000_000)
	for i := range 300 {
		for j, u := range spellings(i) {
			recs = append(recs, &kgo.Record{
				Partition: rng.Int32N(4), Key: []byte("fetcher-" + strconv.Itoa(j)), Value: fmt.Appendf(nil, `{"url":%q}`, u),
				Headers: []kgo.RecordHeader{{Key: "fetcher", Value: []byte(strconv.Itoa(j))}, {Key: "empty", Value: []byte{}},
					{Key: "page", Value: []byte(strconv.Itoa(i))}},
				Timestamp: ts.Add(time.Duration(len(recs)) * time.Millisecond),
			})
		}
	}
	recs = append(recs, &kgo.Record{Partition: 2, Value: []byte(`{"url":"not a url"}`)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	ex, err := keys.NewExtractor("json:url", "url", 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Brokers: brokers, Group: "g-repartition", Input: "in", Output: "g-repartition"}, ex, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Read the output until every input record arrived at least once.
	seen := map[string]int{} // origin partition/offset -> copies
	keyPart := map[string]int{}
	keyOf := map[string]string{} // canonical URL index -> key
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("g-repartition"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for len(seen) < len(recs) {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(seen), len(recs), ctx.Err())
		}
		fs.EachRecord(func(m *kgo.Record) {
			var op, oo, fetcherH, errH, page string
			var empty []byte
			for _, h := range m.Headers {
				switch h.Key {
				case HeaderOriginPartition:
					op = string(h.Value)
				case HeaderOriginOffset:
					oo = string(h.Value)
				case "fetcher":
					fetcherH = string(h.Value)
				case "empty":
					empty = h.Value
				case HeaderError:
					errH = string(h.Value)
				case "page":
					page = string(h.Value)
				}
			}
			seen[op+"/"+oo]++
			if page == "" {
				if m.Key != nil || errH == "" {
					t.Errorf("bad record: key %q, error header %q; want a null key and a reason", m.Key, errH)
				}
				return
			}
			if empty == nil || fetcherH == "" {
				t.Errorf("record %s/%s: headers not kept (%v)", op, oo, m.Headers)
			}
			if len(m.Key) != 32 {
				t.Errorf("record %s/%s: key %q, want 32 hex digits", op, oo, m.Key)
			}
			id := page
			if k, ok := keyOf[id]; ok && k != string(m.Key) {
				t.Errorf("page %s: keys %q and %q for spellings of one URL", id, k, m.Key)
			}
			keyOf[id] = string(m.Key)
			if p, ok := keyPart[string(m.Key)]; ok && p != int(m.Partition) {
				t.Errorf("key %s in partitions %d and %d", m.Key, p, m.Partition)
			}
			keyPart[string(m.Key)] = int(m.Partition)
		})
	}
	if len(keyOf) != 300 {
		t.Errorf("%d distinct pages keyed, want 300", len(keyOf))
	}
}
