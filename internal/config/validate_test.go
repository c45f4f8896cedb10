package config

import (
	"strings"
	"testing"
)

// TestCapacityBound: a plan whose filters need more than 1 TiB for the
// whole topic is refused, naming --capacity and the memory.
func TestCapacityBound(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" if accepted
	}{
		{[]string{"--capacity", "1e9"}, ""},
		{[]string{"--capacity", "450G"}, ""}, // 0.92 TiB
		{[]string{"--capacity", "300G", "--fpr", "0.1%"}, ""},
		{[]string{"--capacity", "1e12"}, "--capacity: 1T keys per window at --fpr 0.01 with 4 generations need 2.04 TiB of filter memory for the whole topic, " +
			"more than the 1 TiB bound on any plan (docs/settings.md): use the expected distinct keys per window of the whole topic (e.g. 1G), or raise --fpr"},
		{[]string{"--capacity", "500G"}, "--capacity: 500G keys per window at --fpr 0.01 with 4 generations need 1.02 TiB"},
		{[]string{"--capacity", "350G", "--fpr", "0.1%"}, "--capacity: 350G keys per window at --fpr 0.001 with 4 generations need 1.04 TiB"},
		{[]string{"--capacity", "1e19"}, "10000000T keys per window at --fpr 0.01 with 4 generations need 19.4 EiB"},
		{[]string{"--fpr", "1e-12"}, "--fpr: 1e-12 is smaller than the filter can reach with 4 generations (512-bit blocks, at most 32 probes): use 1e-9 or more"},
	} {
		_, err := load(t, tc.args...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v refused: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v:\n got %v\nwant %s", tc.args, err, tc.want)
		}
	}
}
