package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// kcatRecord matches what startKcatGroup has kcat print per record.
var kcatRecord = regexp.MustCompile(`(?m)^rec\t(\d+)\t(\d+)$`)

// startKcatGroup runs `kcat -G group` on topic: a librdkafka consumer in
// the group, as someone peeking at the input would start one, printing
// each record's partition and offset.
func startKcatGroup(t *testing.T, kcat, brokers, group, topic string, extra ...string) *proctest.Proc {
	t.Helper()
	args := append([]string{"-b", brokers, "-u", "-X", "client.id=peek", "-o", "beginning", "-f", "rec\t%p\t%o\n"}, extra...)
	args = append(args, "-G", group, topic)
	return proctest.Start(t, proctest.Config{Name: "kcat", Path: kcat, Args: args})
}

// kcatConsumed returns the (partition, offset) of every record kcat printed.
func kcatConsumed(p *proctest.Proc) map[[2]int64]bool {
	out := map[[2]int64]bool{}
	for _, m := range kcatRecord.FindAllStringSubmatch(p.Output(), -1) {
		part, _ := strconv.ParseInt(m[1], 10, 64)
		off, _ := strconv.ParseInt(m[2], 10, 64)
		out[[2]int64{part, off}] = true
	}
	return out
}

// TestKcatInTheWorkersGroup: `kcat -G` with the worker's group id, eager
// (librdkafka's default range,roundrobin) and cooperative, joining after
// the worker (a follower: it gets no partitions, consumes nothing) and
// before it (it leads and takes partitions: the worker obeys, no record is
// consumed by both, and the worker names kcat's client id at ERROR with
// what it holds). Before, a kcat follower got half the partitions while
// the worker went on processing them too, silently.
func TestKcatInTheWorkersGroup(t *testing.T) {
	kcat := kcatTool.Path(t)
	for _, tc := range []struct {
		name      string
		kcatFirst bool
		extra     []string
	}{
		{"eager follower", false, nil},
		{"cooperative follower", false, []string{"-X", "partition.assignment.strategy=cooperative-sticky"}},
		{"eager leader", true, nil},
		{"cooperative leader", true, []string{"-X", "partition.assignment.strategy=cooperative-sticky"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
				"--topic", "orders:4", "--topic", "orders-unique:4", "--topic", "orders-dead:4")
			brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)
			var k *proctest.Proc
			if tc.kcatFirst {
				k = startKcatGroup(t, kcat, brokers, "e2e", "orders", tc.extra...)
				waitFor(t, k, regexp.MustCompile(`(?i)(assigned|incremental assign).*orders`), 60*time.Second)
			}
			w, addr := startWorker(t, brokers, t.TempDir())
			// The member names itself by --client-id's default.
			waitFor(t, w, regexp.MustCompile(`msg="joined generation".* member=bloomgate-`), 60*time.Second)
			if !tc.kcatFirst {
				k = startKcatGroup(t, kcat, brokers, "e2e", "orders", tc.extra...)
			}
			// The ERROR names kcat's client id and, when it leads, what it
			// holds.
			holds := "it holds no partitions"
			if tc.kcatFirst {
				holds = "it holds partitions .* without deduplication"
			}
			waitFor(t, w, regexp.MustCompile(`(level=ERROR msg="group e2e: member \S+ \(client id \\"peek\\".*`+holds+`)`), 60*time.Second)
			if err := w.WaitUntil("the foreign member counted", 30*time.Second, 100*time.Millisecond, func() bool {
				return metricSum(t, addr, "bloomgate_group_foreign_members") == 1
			}); err != nil {
				t.Fatal(err)
			}
			const n = 400
			var lines []string
			for i := range n {
				lines = append(lines, orderLine(fmt.Sprintf("o-%04d", i), i))
			}
			produce(t, kcat, brokers, "orders", lines)
			if err := w.WaitUntil("every record consumed by the worker or kcat", 60*time.Second, 100*time.Millisecond, func() bool {
				return int(metricSum(t, addr, "bloomgate_records_consumed_total"))+len(kcatConsumed(k)) >= n
			}); err != nil {
				t.Fatalf("%v: worker consumed %v, kcat %d\nkcat:\n%s\nworker:\n%s", err, metricSum(t, addr, "bloomgate_records_consumed_total"),
					len(kcatConsumed(k)), k.Tail(30), w.Tail(40))
			}
			byKcat := kcatConsumed(k)
			if !tc.kcatFirst && len(byKcat) != 0 {
				t.Errorf("kcat, a follower of the worker, consumed %d records", len(byKcat))
			}
			if tc.kcatFirst {
				if len(byKcat) == 0 {
					t.Errorf("kcat, the leader, consumed nothing: the test did not put it in charge of a partition")
				}
				if u := metricSum(t, addr, "bloomgate_group_unprocessed_partitions"); u == 0 {
					t.Errorf("bloomgate_group_unprocessed_partitions is 0 while kcat holds partitions")
				}
			}
			stop(t, w, 30*time.Second)
			both := 0
			for _, r := range consume(t, kcat, brokers, "orders-unique") {
				if byKcat[[2]int64{int64(r.srcPartition), r.srcOffset}] {
					both++
				}
			}
			if both > 0 {
				t.Errorf("%d records consumed by both kcat and the worker", both)
			}
		})
	}
}
