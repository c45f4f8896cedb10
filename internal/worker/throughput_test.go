package worker

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestThroughput measures events/s through kfake. Opt-in (BLOOMGATE_WORKER_THROUGHPUT=N
// events): a timing on a shared 2-core machine is a report, not a check;
// the benchmark proper lives in bench/.
func TestThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BLOOMGATE_WORKER_THROUGHPUT"))
	if n <= 0 {
		t.Skip("set BLOOMGATE_WORKER_THROUGHPUT=<events> to measure throughput")
	}
	brokers := newCluster(t, 4)
	evs := genEvents(n, 4, 0.2, 41, base)
	for i := range evs {
		evs[i].value = `{"order_id":"` + string(evs[i].key) + `","amount":1234,"currency":"EUR","customer":"c-000001","items":[1,2,3],"note":"padding padding padding padding padding padding padding padding"}`
	}
	produce(t, brokers, evs)
	cfg := testConfig(brokers)
	cfg.BatchSize = 5000
	cfg.CheckpointInterval = 5 * time.Second
	cfg.CommitInterval = time.Second
	start := time.Now()
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 10*time.Minute, "all consumed", func() bool { return rw.consumed() == uint64(n) })
	el := time.Since(start)
	rw.stop(t)
	t.Logf("%d events in %v (incl. group join): %.0f events/s", n, el, float64(n)/el.Seconds())
}
