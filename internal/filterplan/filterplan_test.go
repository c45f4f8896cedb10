package filterplan

import (
	"fmt"
	"testing"
	"time"
)

// TestCheck: values at the edges of each range are accepted, values beyond
// them refused with the words users read.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		window      time.Duration
		generations int
		capacity    uint64
		fpr         float64
		want        string // the problems, joined; "" if accepted
	}{
		{24 * time.Hour, 4, 10_000_000, 0.01, ""},
		{time.Second, MinGenerations, 1, 0.99, ""},
		{63 * time.Second, MaxGenerations, 1, 1e-9, ""},
		{0, 4, 1, 0.01, "[window: 0s: must be positive (e.g. 24h)]"},
		{-time.Hour, 4, 1, 0.01, "[window: -1h: must be positive (e.g. 24h)]"},
		{time.Hour, 1, 1, 0.01, "[generations: 1: must be between 2 and 64 (e.g. 4)]"},
		{time.Hour, MaxGenerations + 1, 1, 0.01, "[generations: 65: must be between 2 and 64 (e.g. 4)]"},
		{2 * time.Second, 4, 1, 0.01, "[window: 2s over 4 generations gives generations shorter than 1s: use a longer --window or fewer --generations]"},
		{time.Hour, 4, 0, 0.01, "[capacity: 0 keys: set the expected distinct keys per window (e.g. 10M)]"},
		{time.Hour, 4, 1, 0, "[fpr: 0: must be strictly between 0 and 1, i.e. 0% and 100% (e.g. 0.01 or 1%)]"},
		{time.Hour, 4, 1, 1, "[fpr: 1: must be strictly between 0 and 1, i.e. 0% and 100% (e.g. 0.01 or 1%)]"},
		// Every problem, in the order of the settings; no span for a
		// window or generations already out of range.
		{0, 0, 0, 2, "[window: 0s: must be positive (e.g. 24h) generations: 0: must be between 2 and 64 (e.g. 4) " +
			"capacity: 0 keys: set the expected distinct keys per window (e.g. 10M) " +
			"fpr: 2: must be strictly between 0 and 1, i.e. 0% and 100% (e.g. 0.01 or 1%)]"},
	} {
		errs := Params{Window: tc.window, Generations: tc.generations, Capacity: tc.capacity, FPR: tc.fpr}.Check()
		got := ""
		if len(errs) > 0 {
			got = fmt.Sprint(errs)
		}
		if got != tc.want {
			t.Errorf("Params{%v, %d, %d, %v}.Check()\n got %s\nwant %s", tc.window, tc.generations, tc.capacity, tc.fpr, got, tc.want)
		}
	}
}
