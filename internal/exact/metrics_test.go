package exact

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	wrapped := func(p string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"topic": "orders", "partition": p}, reg)
	}
	dir := t.TempDir()
	s, err := Open(dir, Options{Registerer: wrapped("0")})
	if err != nil {
		t.Fatal(err)
	}
	other := openT(t, t.TempDir(), Options{Registerer: wrapped("1")}) // same registry, other labels
	_ = other
	if _, err := Open(t.TempDir(), Options{Registerer: wrapped("0")}); err == nil {
		t.Error("second store with the same labels: want a registration error")
	}
	fill(t, s, 10, 1)
	mustHas(t, s, 1, hashN(1, 0))
	mustHas(t, s, 1, hashN(1, 99))
	mustContain(t, s, hashN(1, 1))
	checkpointT(t, s)

	count := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.Metric {
				got := map[string]string{}
				for _, l := range m.Label {
					got[l.GetName()] = l.GetValue()
				}
				for i := 0; i < len(labels); i += 2 {
					if got[labels[i]] != labels[i+1] {
						continue metric
					}
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		t.Fatalf("no series %s %v", name, labels)
		return 0
	}
	p0 := []string{"partition", "0"}
	if got := count("bloomgate_exact_lookups_total", append(p0, "result", "found")...); got != 2 {
		t.Errorf("found lookups = %v, want 2", got)
	}
	if got := count("bloomgate_exact_lookups_total", append(p0, "result", "absent")...); got != 1 {
		t.Errorf("absent lookups = %v, want 1", got)
	}
	if got := count("bloomgate_exact_written_bytes_total", p0...); got != 16+10*16+12 {
		t.Errorf("written bytes = %v, want one run of 10 hashes (%d)", got, 16+10*16+12)
	}
	if got := count("bloomgate_exact_lookup_seconds", p0...); got != 3 {
		t.Errorf("lookup latency samples = %v, want 3", got)
	}
	if got := count("bloomgate_exact_inserts_total", p0...); got != 10 {
		t.Errorf("inserts = %v, want 10", got)
	}
	if got := count("bloomgate_exact_checkpoint_cut_seconds", p0...); got != 1 {
		t.Errorf("checkpoint cuts = %v, want 1", got)
	}
	if got := count("bloomgate_exact_disk_bytes", p0...); got <= 0 {
		t.Errorf("disk bytes = %v, want > 0", got)
	}
	// Closing unregisters, so the partition's store can be opened again
	// (after a rebalance) on the same registry.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openT(t, dir, Options{Registerer: wrapped("0")})
}
