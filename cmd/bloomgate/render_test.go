package main

import (
	"math"
	"testing"
)

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{45030, "44.0 KiB"},
		{1<<20 - 1, "1024.0 KiB"}, // the unit is chosen before rounding
		{1 << 20, "1.0 MiB"},
		{3 << 29, "1.5 GiB"},
		{1 << 40, "1.0 TiB"},
		{1 << 50, "1.0 PiB"},
		{math.MaxInt64, "8.0 EiB"},
	} {
		if got := byteSize(tc.n); got != tc.want {
			t.Errorf("byteSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
