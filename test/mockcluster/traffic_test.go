package mockcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// The test's own clients (producer, output observer) refresh metadata
// quickly after a leader move, so that their delays stay small beside the
// worker's; the worker runs with its defaults.
var clientOpts = []kgo.Opt{
	kgo.MaxVersions(mockVersions()),
	kgo.MetadataMinAge(100 * time.Millisecond),
	kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
}

// mockVersions are the request versions the test's clients use with the
// mock cluster of librdkafka 2.0.2: Kafka 2.3's (it answers ApiVersions v3
// with a response franz-go cannot read), ListOffsets at most v3 (from v4
// on it writes the leader epoch as 8 bytes instead of 4).
func mockVersions() *kversion.Versions {
	v := kversion.V2_3_0()
	v.SetMaxKeyVersion(kmsg.ListOffsets.Int16(), 3)
	return v
}

// traffic writes a bounded stream of keyed records to every input
// partition (each a unique key, or every dupEvery-th a key the partition
// had before) and watches the output.
type traffic struct {
	partitions int

	mu      sync.Mutex
	nextSeq []int                // per partition: the next sequence number
	acked   [][]time.Time        // per partition, per seq: when a unique record was acknowledged (zero: not yet, or a duplicate)
	unique  [][]bool             // per partition, per seq: the record carried a new key
	seen    map[[2]int]time.Time // (partition, seq) → when its output copy was first seen
	errs    []string
}

func newTraffic(partitions int) *traffic {
	return &traffic{partitions: partitions, nextSeq: make([]int, partitions),
		acked: make([][]time.Time, partitions), unique: make([][]bool, partitions), seen: map[[2]int]time.Time{}}
}

const dupEvery = 4

func key(p, seq int) string { return fmt.Sprintf("k-%d-%d", p, seq) }

// produce writes rate records per second per partition until ctx ends or
// max records per partition were written. Acknowledgements arrive
// asynchronously; it returns once every record is acknowledged or failed.
func (tr *traffic) produce(ctx context.Context, brokers []string, topic string, rate, max int) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordDeliveryTimeout(60 * time.Second)}, clientOpts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for n := 0; n < max; n++ {
		select {
		case <-ctx.Done():
			n = max
			continue
		case <-tick.C:
		}
		for p := 0; p < tr.partitions; p++ {
			tr.mu.Lock()
			seq := tr.nextSeq[p]
			tr.nextSeq[p]++
			uniq := seq < dupEvery || seq%dupEvery != 0
			k := key(p, seq)
			if !uniq {
				// A key this partition had before (a unique one).
				for {
					s := rng.IntN(seq)
					if tr.unique[p][s] {
						k = key(p, s)
						break
					}
				}
			}
			tr.unique[p] = append(tr.unique[p], uniq)
			tr.acked[p] = append(tr.acked[p], time.Time{})
			tr.mu.Unlock()
			r := &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%d/%d", p, seq)), Partition: int32(p)}
			wg.Add(1)
			cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				defer wg.Done()
				now := time.Now()
				tr.mu.Lock()
				defer tr.mu.Unlock()
				if err != nil {
					tr.errs = append(tr.errs, fmt.Sprintf("producing %s: %v", r.Key, err))
					return
				}
				if uniq {
					tr.acked[p][seq] = now
				}
			})
		}
	}
	wg.Wait()
	return nil
}

// observe reads the output from the start until ctx ends, noting when each
// record was first seen.
func (tr *traffic) observe(ctx context.Context, brokers []string, topic string) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}, clientOpts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		tr.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			p, seq, ok := parseValue(r.Value)
			if !ok {
				tr.errs = append(tr.errs, fmt.Sprintf("output record %q: not the test's", r.Value))
				return
			}
			if _, dup := tr.seen[[2]int{p, seq}]; !dup {
				tr.seen[[2]int{p, seq}] = now
			}
		})
		tr.mu.Unlock()
	}
	return nil
}

func parseValue(v []byte) (p, seq int, ok bool) {
	a, b, found := strings.Cut(string(v), "/")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(a)
	seq, err2 := strconv.Atoi(b)
	return p, seq, err1 == nil && err2 == nil
}

// healed reports, for each partition in ps, how long after at the output
// held the first unique record acknowledged at or after at (false while
// some partition's has not been seen yet): the longest of those, and how
// long after at that partition's record was acknowledged (the test
// producer's share).
func (tr *traffic) healed(at time.Time, ps []int) (worst, acked time.Duration, ok bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, p := range ps {
		first := -1
		for seq, a := range tr.acked[p] {
			if !a.IsZero() && !a.Before(at) {
				first = seq
				break
			}
		}
		if first < 0 {
			return 0, 0, false
		}
		s, seen := tr.seen[[2]int{p, first}]
		if !seen {
			return 0, 0, false
		}
		if d := s.Sub(at); d >= worst {
			worst, acked = d, tr.acked[p][first].Sub(at)
		}
	}
	return worst, acked, true
}

// inStep reports whether every unique record acknowledged before the given
// time has been seen on the output.
func (tr *traffic) inStep(before time.Time) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for p := range tr.partitions {
		for seq, a := range tr.acked[p] {
			if !a.IsZero() && a.Before(before) {
				if _, ok := tr.seen[[2]int{p, seq}]; !ok {
					return false
				}
			}
		}
	}
	return true
}

func (tr *traffic) errors() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.errs...)
}

// readAll reads every record of topic up to its high-water marks.
func readAll(ctx context.Context, brokers []string, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, clientOpts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := listEnds(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	offsets := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			offsets[p] = kgo.NewOffset().AtStart()
		}
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	var recs []*kgo.Record
	left := map[int32]int64{}
	for p, e := range ends {
		if e > 0 {
			left[p] = e
		}
	}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w (%d records read)", topic, err, len(recs))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok {
				recs = append(recs, r)
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			}
		})
	}
	return recs, nil
}
