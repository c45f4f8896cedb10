package checkpoint

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	} {
		if got[name] != 2 {
			t.Errorf("%s: %d series, want 2 (created up front)", name, got[name])
		}
	}
}

func TestInspectJSONAndEmptyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/not-created-yet"
	s := openT(t, "file://"+dir, Options{})
	if _, err := Inspect(ctx, s); err == nil || !strings.Contains(err.Error(), "no checkpoints") {
		t.Fatalf("inspect of a missing directory: %v", err)
	}
	p := s.Partition("g", "t", 1)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, state{offset: 7, gens: []Generation{gen(1, false, 1, 100)}}.checkpoint()); err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Partitions []struct {
			Topic       string `json:"topic"`
			Seq         uint64 `json:"seq"`
			InputOffset int64  `json:"input_offset"`
			Filter      struct {
				Window string `json:"window"`
			} `json:"filter"`
			Generations []struct {
				EstKeys uint64 `json:"estimated_keys"`
			} `json:"generations"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Partitions) != 1 || back.Partitions[0].InputOffset != 7 || back.Partitions[0].Filter.Window != "24h0m0s" ||
		len(back.Partitions[0].Generations) != 1 || back.Partitions[0].Generations[0].EstKeys != 9 {
		t.Fatalf("json report: %s", b)
	}
}

// TestInspectTextGolden pins the human report (and serves as its example).
func TestInspectTextGolden(t *testing.T) {
	ctx := context.Background()
	s := openT(t, "mem://inspect-golden/prefix", Options{})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.opts.now = func() time.Time { return now }
	p := s.Partition("orders-dedup", "orders", 0)
	if err := p.Claim(ctx, "worker-1/4242"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 1200345, gens: []Generation{gen(1, true, 1, 20000), gen(2, true, 2, 20000), gen(3, false, 3, 5000)}}
	cp := st.checkpoint()
	cp.Owner = "worker-1/4242"
	cp.OutputOffsets = map[string]map[int]int64{"orders-unique": {0: 1100000}, "orders-dups": {0: 100345}}
	if _, err := p.Commit(ctx, cp); err != nil {
		t.Fatal(err)
	}
	now = now.Add(95 * time.Second)
	rep, err := Inspect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "inspect.txt")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Fatalf("inspect text changed:\n%s", b.String())
	}
}
