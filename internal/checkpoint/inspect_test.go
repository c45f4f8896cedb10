package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

// goldenReport inspects a fixed location: one partition with two sealed
// generations and a live one, written by a handle whose writer nonce and
// clock are pinned, so that every byte of the report is reproducible. The
// named memory bucket is emptied first: it outlives a test in the process.
func goldenReport(t *testing.T) *Report {
	t.Helper()
	ctx := context.Background()
	memStore.Lock()
	delete(memStore.buckets, "inspect-golden")
	memStore.Unlock()
	s := openT(t, "mem://inspect-golden/prefix", Options{})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.opts.now = func() time.Time { return now }
	p := s.Partition("orders-dedup", "orders", 0)
	p.writer = "a1b2c3d4e5f6"
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
	return rep
}

// checkGolden compares got with testdata/name, rewriting it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s changed:\n%s", path, got)
	}
}

// TestInspectJSONGolden pins the report's data as `bloomgate inspect
// --json` prints it (indented by two spaces, one trailing newline). The
// command's text golden renders this same file.
func TestInspectJSONGolden(t *testing.T) {
	b, err := json.MarshalIndent(goldenReport(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "inspect.json", append(b, '\n'))
}
