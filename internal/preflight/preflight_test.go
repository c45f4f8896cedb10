package preflight

import "testing"

func TestPartitionList(t *testing.T) {
	for want, ps := range map[string][]int{
		"":          nil,
		"0":         {0},
		"0-3":       {0, 1, 2, 3},
		"0-1,3,5-7": {0, 1, 3, 5, 6, 7},
	} {
		if got := partitionList(ps); got != want {
			t.Errorf("partitionList(%v) = %q, want %q", ps, got, want)
		}
	}
}

// TestExactStoreBytes: 16 bytes per key of G generations and one more:
// the base Kubernetes plan (100M keys over 24 partitions, 4 generations)
// needs about 106 MiB per partition.
func TestExactStoreBytes(t *testing.T) {
	if got, want := ExactStoreBytes(4_166_667, 4), uint64(16*4_166_667*5/3); got != want {
		t.Errorf("ExactStoreBytes = %d, want %d", got, want)
	}
	if got := ExactStoreBytes(1000, 2); got != 16*1000*3 {
		t.Errorf("2 generations: %d, want %d", got, 16*1000*3)
	}
}
