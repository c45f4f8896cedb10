package worker

import "testing"

func TestPartitionList(t *testing.T) {
	for want, ps := range map[string][]int{
		"":          nil,
		"0":         {0},
		"0-3":       {0, 1, 2, 3},
		"0-1,3,5-7": {0, 1, 3, 5, 6, 7},
	} {
		if got := PartitionList(ps); got != want {
			t.Errorf("PartitionList(%v) = %q, want %q", ps, got, want)
		}
	}
}
