package preflight

import "testing"

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
