package demo

import (
	"math"
	"testing"

	"github.com/bloomgate/bloomgate/internal/worker"
)

func TestDevCheckpointURL(t *testing.T) {
	dir := t.TempDir()
	a, err := devCheckpointURL("file://"+dir, "run-x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := devCheckpointURL("file://"+dir, "run-x")
	if err != nil {
		t.Fatal(err)
	}
	if a != "file://"+dir+"/run-x" || b != "file://"+dir+"/run-x-2" {
		t.Errorf("got %s and %s, want run-x and run-x-2 below %s", a, b, dir)
	}
	if u, err := devCheckpointURL("s3://bucket/pre?region=eu-west-1", "run-y"); err != nil || u != "s3://bucket/pre/run-y?region=eu-west-1" {
		t.Errorf("s3: %q, %v", u, err)
	}
	if _, err := devCheckpointURL("ftp://x", "run-z"); err == nil {
		t.Error("ftp accepted")
	}
}

// TestPlanCapacity: the planned generation holds all of a partition's
// share of the demo's keys, and the worker's sizing (capacity per
// partition, then per generation) gives back the planned figure.
func TestPlanCapacity(t *testing.T) {
	for _, tt := range []struct{ unique, partitions int }{{1, 1}, {1, 8}, {1600, 8}, {160000, 8}, {800000, 8}, {4800, 3}} {
		p := planCapacity(tt.unique, tt.partitions, 4)
		share := float64(tt.unique) / float64(tt.partitions)
		if float64(p.perGen) < share+4*math.Sqrt(share) {
			t.Errorf("%+v: %d keys per generation, below the share %.0f + 4 sigma", tt, p.perGen, share)
		}
		perPartition := (p.capacity + uint64(tt.partitions) - 1) / uint64(tt.partitions)
		if got := (perPartition + 2) / 3; got != p.perGen {
			t.Errorf("%+v: capacity %d gives %d keys per partition and generation, planned %d", tt, p.capacity, got, p.perGen)
		}
	}
}

// TestCountTracker: totals keep the counts of partitions the worker has
// released, and are final once every partition was seen stopping.
func TestCountTracker(t *testing.T) {
	ps := func(p int, gen int32, state string, consumed, forwarded uint64) worker.PartitionStatus {
		return worker.PartitionStatus{Partition: p, Generation: gen, State: state, Consumed: consumed, Forwarded: forwarded, Duplicates: consumed - forwarded}
	}
	var tr countTracker
	if c, final := tr.totals(); c != (devCounts{}) || final {
		t.Fatalf("empty tracker: %+v, final %v", c, final)
	}
	tr.observe(worker.Status{Partitions: []worker.PartitionStatus{ps(0, 1, "running", 10, 8), ps(1, 1, "running", 5, 5)}})
	tr.observe(worker.Status{Partitions: []worker.PartitionStatus{ps(0, 1, "stopping", 12, 9)}}) // 1 released
	c, final := tr.totals()
	if c.consumed != 17 || c.forwarded != 14 || c.duplicates != 3 || final {
		t.Errorf("after a release: %+v, final %v; want 17 consumed, 14 forwarded, not final", c, final)
	}
	// A new generation's counts start at 0 and add to the old ones.
	tr.observe(worker.Status{Partitions: []worker.PartitionStatus{ps(1, 2, "stopping", 4, 4)}})
	tr.observe(worker.Status{Partitions: []worker.PartitionStatus{ps(1, 1, "stopping", 5, 5)}})
	if c, final := tr.totals(); c.consumed != 21 || c.forwarded != 18 || !final {
		t.Errorf("all stopping: %+v, final %v; want 21 consumed, 18 forwarded, final", c, final)
	}
}
