package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// peek is a consumer that is not bloomgate, started with the worker's
// group id (as `kcat -G` or a console consumer is while someone looks at
// the input): a franz-go client with the given balancer, committing as
// such clients do by default.
type peek struct {
	cl       *kgo.Client
	mu       sync.Mutex
	assigned []int32
	got      map[[2]int64]bool // partition, offset
}

func startPeek(t *testing.T, brokers []string, balancer kgo.GroupBalancer) *peek {
	t.Helper()
	pk := &peek{got: map[[2]int64]bool{}}
	track := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		pk.mu.Lock()
		pk.assigned = slices.Compact(slices.Sorted(slices.Values(append(pk.assigned, m[tIn]...)))) // cooperative: only what is added
		pk.mu.Unlock()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("peek"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(tIn),
		kgo.Balancers(balancer), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(track), kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, m map[string][]int32) {
			pk.mu.Lock()
			pk.assigned = slices.DeleteFunc(pk.assigned, func(p int32) bool { return slices.Contains(m[tIn], p) })
			pk.mu.Unlock()
		}), kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {
			pk.mu.Lock()
			pk.assigned = nil
			pk.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	pk.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				pk.mu.Lock()
				pk.got[[2]int64{int64(r.Partition), r.Offset}] = true
				pk.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return pk
}

func (pk *peek) holds() []int32 {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return slices.Clone(pk.assigned)
}

func (pk *peek) consumed() map[[2]int64]bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return maps.Clone(pk.got)
}

// forwardedOffsets reads the output and returns the input (partition,
// offset) of every forwarded record.
func forwardedOffsets(t *testing.T, brokers []string) map[[2]int64]bool {
	out := map[[2]int64]bool{}
	for _, msgs := range kafkatest.ReadTopic(t, brokers, tOut, 4) {
		for _, m := range msgs {
			p, o, _ := SourceOf(m.Headers)
			out[[2]int64{int64(p), o}] = true
		}
	}
	return out
}

// TestForeignMemberGetsNothing: a consumer that is not bloomgate joins the
// group of a running worker (eager, as kcat's default range balancer, and
// cooperative). The worker, leading, gives it no partitions, processes
// every event itself, and reports the member by its client id: an ERROR,
// the gauge, the status page. Before, with the eager one the worker gave
// it half the partitions and went on processing them too.
func TestForeignMemberGetsNothing(t *testing.T) {
	t.Parallel()
	for _, bal := range []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.CooperativeStickyBalancer()} {
		t.Run(bal.ProtocolName(), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 4)
			cfg := testConfig(brokers)
			defaultGroupTimings(&cfg)
			var logs kafkatest.LogBuffer
			a := startWorker(t, cfg, newMemStore(), func(w *Worker) {
				w.log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
			})
			waitFor(t, 60*time.Second, "the worker owns every partition", func() bool { return len(a.w.Status().Assigned) == 4 })
			pk := startPeek(t, brokers, bal)
			waitFor(t, 60*time.Second, "the worker reports the foreign member, holding nothing", func() bool {
				s := a.w.Status()
				return len(s.ForeignMembers) == 1 && len(s.Assigned) == 4 && a.metricSum(t, "bloomgate_group_foreign_members") == 1
			})
			if f := a.w.Status().ForeignMembers[0]; f.ClientID != "peek" || len(f.Holds) != 0 {
				t.Errorf("reported %+v", f)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), `client id \"peek\"`) {
				t.Errorf("no ERROR naming the member's client id:\n%s", logs.String())
			}
			evs := kafkatest.GenEvents(2000, 4, 0, 7, base)
			produce(t, brokers, evs)
			waitFor(t, 60*time.Second, "the worker consumed every event", func() bool { return a.consumed() == 2000 })
			if n := len(pk.consumed()); n != 0 || len(pk.holds()) != 0 {
				t.Errorf("the foreign member holds %v and consumed %d events", pk.holds(), n)
			}
			if n := a.metricSum(t, "bloomgate_group_unprocessed_partitions"); n != 0 {
				t.Errorf("%v partitions unprocessed", n)
			}
		})
	}
}

// TestForeignLeaderReported: a consumer that is not bloomgate leads the
// group (it joined first) and gives the worker half of the partitions.
// The worker obeys; no event is consumed by both; it reports the member,
// the partitions it holds, and those partitions as unprocessed.
func TestForeignLeaderReported(t *testing.T) {
	t.Parallel()
	for _, bal := range []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.CooperativeStickyBalancer()} {
		t.Run(bal.ProtocolName(), func(t *testing.T) {
			t.Parallel()
			brokers := newCluster(t, 4)
			pk := startPeek(t, brokers, bal)
			waitFor(t, 60*time.Second, "the foreign consumer owns every partition", func() bool { return len(pk.holds()) == 4 })
			cfg := testConfig(brokers)
			defaultGroupTimings(&cfg)
			var logs kafkatest.LogBuffer
			a := startWorker(t, cfg, newMemStore(), func(w *Worker) {
				w.log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))
			})
			waitFor(t, 60*time.Second, "the two share the partitions and the worker reports it", func() bool {
				s := a.w.Status()
				return len(s.Assigned) == 2 && len(pk.holds()) == 2 && len(s.ForeignMembers) == 1 && len(s.ForeignMembers[0].Holds) == 2 &&
					len(s.Unprocessed) == 2 && a.metricSum(t, "bloomgate_group_unprocessed_partitions") == 2
			})
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "without deduplication") {
				t.Errorf("no ERROR naming what the foreign member holds:\n%s", logs.String())
			}
			// While the foreign member does not consume, what waits in its
			// partitions is the group's unprocessed lag.
			pk.cl.PauseFetchTopics(tIn)
			evs := kafkatest.GenEvents(2000, 4, 0, 7, base)
			produce(t, brokers, evs)
			waiting := 0
			for _, e := range evs {
				if slices.Contains(pk.holds(), int32(e.Partition)) {
					waiting++
				}
			}
			waitFor(t, 60*time.Second, fmt.Sprintf("the unprocessed lag counts the %d records in the foreign member's partitions", waiting), func() bool {
				return a.metricSum(t, "bloomgate_group_unprocessed_lag") == float64(waiting) && a.w.Status().UnprocessedLag == int64(waiting)
			})
			pk.cl.ResumeFetchTopics(tIn)
			waitFor(t, 60*time.Second, "every event consumed by one of them", func() bool {
				return int(a.consumed())+len(pk.consumed()) >= 2000
			})
			mine := forwardedOffsets(t, brokers)
			for k := range pk.consumed() {
				if mine[k] {
					t.Errorf("partition %d offset %d consumed by both", k[0], k[1])
				}
			}
		})
	}
}
