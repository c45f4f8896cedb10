package worker

import "testing"

// TestFetchBytes: up to 32 partitions each fetch is 512 KiB; beyond, the
// partitions share 16 MiB, down to 128 KiB each.
func TestFetchBytes(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 512 << 10}, {1, 512 << 10}, {8, 512 << 10}, {16, 512 << 10}, {32, 512 << 10}, {64, 256 << 10}, {128, 128 << 10}, {1024, 128 << 10},
	} {
		if got := fetchBytes(tc.n); got != tc.want {
			t.Errorf("fetchBytes(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}
