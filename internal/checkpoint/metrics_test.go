package checkpoint

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	s1 := openT(t, "mem://metrics-1", Options{Registerer: reg})
	s2 := openT(t, "mem://metrics-2", Options{Registerer: reg}) // shares the registry
	s1.Partition("g", "orders", 3)
	s2.Partition("g", "orders", 4)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		for _, m := range mf.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			if strings.Join(names, ",") != "partition,topic" {
				t.Errorf("%s labels %v", mf.GetName(), names)
			}
		}
	}
	for _, name := range []string{
		"bloomgate_checkpoint_duration_seconds", "bloomgate_checkpoint_bytes_total",
		"bloomgate_checkpoint_failures_total", "bloomgate_checkpoint_last_success_timestamp_seconds",
		"bloomgate_checkpoint_restore_duration_seconds", "bloomgate_checkpoint_restore_fallbacks_total",
		"bloomgate_checkpoint_objects_deleted_total", "bloomgate_checkpoint_fenced_total",
		"bloomgate_checkpoint_objects_missing_total",
	} {
		if got[name] != 2 {
			t.Errorf("%s: %d series, want 2 (created up front)", name, got[name])
		}
	}
}
