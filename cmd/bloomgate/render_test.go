package main

import (
	"math"
	"testing"
)

// TestByteSize: the commands write sizes as the status page does
// (quantity.Bytes), three significant digits.
func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{-1, "0 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{45030, "44.0 KiB"},
		{1<<20 - 1, "1.00 MiB"},
		{1 << 20, "1.00 MiB"},
		{3 << 29, "1.50 GiB"},
		{1 << 40, "1.00 TiB"},
		{1 << 50, "1.00 PiB"},
		{math.MaxInt64, "8.00 EiB"},
	} {
		if got := byteSize(tc.n); got != tc.want {
			t.Errorf("byteSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
