package worker

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestThroughput measures events/s through kfake, for the worker and for a
// bare kafka-go pipe (per-partition reader → shared writer, acks=all) over
// the same input. Opt-in (BLOOMGATE_WORKER_THROUGHPUT=N events): a timing on
// a shared 2-core machine is a report, not a check; the benchmark proper is
// `make bench`.
func TestThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BLOOMGATE_WORKER_THROUGHPUT"))
	if n <= 0 {
		t.Skip("set BLOOMGATE_WORKER_THROUGHPUT=<events> to measure throughput")
	}
	const parts = 4
	brokers := newCluster(t, parts)
	evs := genEvents(n, parts, 0.2, 41, base)
	for i := range evs {
		evs[i].Value = `{"order_id":"` + string(evs[i].Key) + `","amount":1234,"currency":"EUR","customer":"c-000001","items":[1,2,3],"note":"padding padding padding padding padding padding padding padding"}`
	}
	produce(t, brokers, evs)

	// Pipe: same reads and writes, no filter, no commits.
	start := time.Now()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: kafka.BalancerFunc(func(m kafka.Message, ps ...int) int {
		src, _, _ := SourceOf(m.Headers)
		return ps[targetPartition(src, len(ps))]
	}),
		RequiredAcks: kafka.RequireAll, BatchSize: 5000, BatchTimeout: 2 * time.Millisecond}
	var wg sync.WaitGroup
	per := map[int]int{}
	for _, e := range evs {
		per[e.Partition]++
	}
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: tIn, Partition: p, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, QueueCapacity: 5000})
			defer r.Close()
			ctx := context.Background()
			var rb recordBuilder
			prov := newProvenance(nil, "g", tIn, p)
			for got := 0; got < per[p]; {
				rb.reset(p, prov, false)
				m, err := r.FetchMessage(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				rb.add(tDup, &m, "")
				got++
				for len(rb.recs) < 5000 && got < per[p] {
					fctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
					m, err := r.FetchMessage(fctx)
					cancel()
					if err != nil {
						break
					}
					rb.add(tDup, &m, "")
					got++
				}
				msgs := make([]kafka.Message, len(rb.recs))
				for i := range msgs {
					msgs[i] = rb.message(i)
				}
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					t.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	w.Close()
	pipe := time.Since(start)

	cfg := testConfig(brokers)
	cfg.Duplicates = ""
	cfg.BatchSize = 5000
	cfg.CheckpointInterval = 5 * time.Second
	cfg.CommitInterval = time.Second
	start = time.Now()
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 10*time.Minute, "all consumed", func() bool { return rw.consumed() == uint64(n) })
	el := time.Since(start)
	rw.stop(t)
	t.Logf("%d events: pipe %v (%.0f/s); worker %v incl. group join (%.0f/s); ratio %.2f",
		n, pipe, float64(n)/pipe.Seconds(), el, float64(n)/el.Seconds(), pipe.Seconds()/el.Seconds())
}
