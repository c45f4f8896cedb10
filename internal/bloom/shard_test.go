package bloom

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

func TestConfigValidate(t *testing.T) {
	good := Config{Window: 24 * time.Hour, Generations: 4, Capacity: 1_000_000, FPR: 0.01}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"zero capacity", func(c *Config) { c.Capacity = 0 }, "capacity"},
		{"fpr 0", func(c *Config) { c.FPR = 0 }, "fpr"},
		{"fpr 1", func(c *Config) { c.FPR = 1 }, "fpr"},
		{"fpr negative", func(c *Config) { c.FPR = -0.1 }, "fpr"},
		{"one generation", func(c *Config) { c.Generations = 1 }, "generations"},
		{"too many generations", func(c *Config) { c.Generations = filterplan.MaxGenerations + 1 }, "generations"},
		{"zero window", func(c *Config) { c.Window = 0 }, "window"},
		{"negative window", func(c *Config) { c.Window = -time.Second }, "window"},
		{"window shorter than spans", func(c *Config) { c.Window = 2 }, "window"},
		{"absurd size", func(c *Config) { c.Capacity = 1 << 40 }, "capacity"},
		{"tiny fpr", func(c *Config) { c.FPR = 1e-300 }, "fpr"},
	} {
		c := good
		tc.edit(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q does not name %q", tc.name, err, tc.field)
		}
		if s, err2 := NewShard(c); s != nil || err2 == nil {
			t.Errorf("%s: NewShard accepted it", tc.name)
		}
	}
	if err := (Config{Window: time.Hour, Generations: 2, Capacity: 1 << 40, FPR: 0.01}).Validate(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("absurd size: %v, want ErrTooLarge", err)
	}
}

// at returns the instant span·i + off since the Unix epoch.
func at(span time.Duration, i int64, off time.Duration) time.Time {
	return time.Unix(0, int64(span)*i+int64(off))
}

func TestShardWindowEdges(t *testing.T) {
	cfg := Config{Window: 3 * time.Hour, Generations: 4, Capacity: 10_000, FPR: 0.01}
	span := time.Hour
	const s0 = 480_000 // some span in 2024
	key, other := HashKey([]byte("order-1")), HashKey([]byte("order-2"))

	t.Run("forgotten when its generation leaves the ring", func(t *testing.T) {
		s, _ := NewShard(cfg)
		if s.Span() != span {
			t.Fatalf("span %v, want %v", s.Span(), span)
		}
		if s.TestAndAdd(key, at(span, s0, 10*time.Minute)) {
			t.Fatal("fresh key reported seen")
		}
		// Remembered through the last instant before span s0+G starts…
		for i := int64(1); i < 4; i++ {
			if seen := s.TestAndAdd(other, at(span, s0+i, 0)); seen != (i > 1) {
				t.Fatalf("other key at span %d: wrong answer", i)
			}
			if !s.Test(key) {
				t.Fatalf("key forgotten at span s0+%d", i)
			}
		}
		s.Advance(at(span, s0+4, -1))
		if !s.Test(key) {
			t.Fatal("key forgotten 1 ns before its generation leaves")
		}
		if got := at(span, s0+4, -1).Sub(at(span, s0, 10*time.Minute)); got < cfg.Window {
			t.Fatalf("remembered only %v", got)
		}
		// …and forgotten exactly when span s0+G starts.
		s.Advance(at(span, s0+4, 0))
		if s.Test(key) {
			t.Fatal("key still seen after its generation left the ring")
		}
		if n := len(s.Stats().Generations); n != 4 {
			t.Fatalf("%d generations, want 4", n)
		}
	})

	t.Run("span boundary belongs to the new span", func(t *testing.T) {
		s, _ := NewShard(cfg)
		s.TestAndAdd(key, at(span, s0, -1)) // last ns of span s0-1
		s.TestAndAdd(other, at(span, s0, 0))
		st := s.Stats()
		if len(st.Generations) != 2 || st.Generations[0].ID != s0-1 || st.Generations[1].ID != s0 {
			t.Fatalf("generations %+v", st.Generations)
		}
		if !st.Generations[1].Start.Equal(at(span, s0, 0)) || !st.Generations[1].End.Equal(at(span, s0+1, 0)) {
			t.Fatalf("generation bounds %v–%v", st.Generations[1].Start, st.Generations[1].End)
		}
	})

	t.Run("re-sighting extends memory", func(t *testing.T) {
		s, _ := NewShard(cfg)
		s.TestAndAdd(key, at(span, s0, 0))
		if !s.TestAndAdd(key, at(span, s0+2, 0)) {
			t.Fatal("duplicate inside window not seen")
		}
		s.Advance(at(span, s0+5, 0)) // generation s0 gone, s0+2 still there
		if !s.Test(key) {
			t.Fatal("key seen again at s0+2 forgotten before s0+2+G")
		}
		s.Advance(at(span, s0+6, 0))
		if s.Test(key) {
			t.Fatal("key remembered past s0+2+G")
		}
	})

	t.Run("gap longer than the window drops everything", func(t *testing.T) {
		s, _ := NewShard(cfg)
		s.TestAndAdd(key, at(span, s0, 0))
		s.TestAndAdd(other, at(span, s0+1, 0))
		if s.TestAndAdd(other, at(span, s0+100, 0)) || s.Test(key) {
			t.Fatal("keys survived a gap longer than the window")
		}
		if n := len(s.Stats().Generations); n != 1 {
			t.Fatalf("%d generations after gap, want 1", n)
		}
	})

	t.Run("late events go to the newest generation", func(t *testing.T) {
		s, _ := NewShard(cfg)
		s.TestAndAdd(other, at(span, s0+3, 0))
		if s.TestAndAdd(key, at(span, s0, 0)) { // late by 3 spans
			t.Fatal("fresh late key reported seen")
		}
		if s.TestAndAdd(key, at(span, s0-50, 0)) == false { // older than the ring
			t.Fatal("late duplicate not seen")
		}
		st := s.Stats()
		if len(st.Generations) != 1 || st.Generations[0].ID != s0+3 || st.Generations[0].Inserts != 2 {
			t.Fatalf("late events rotated or lost: %+v", st.Generations)
		}
		s.Advance(at(span, s0+6, 59*time.Minute))
		if !s.Test(key) {
			t.Fatal("late key forgotten before the newest generation left")
		}
		s.Advance(at(span, s0+7, 0))
		if s.Test(key) {
			t.Fatal("late key remembered too long")
		}
	})
}

// TestShardNoFalseNegatives replays random sightings with jittered,
// sometimes out-of-order timestamps and checks the contract: a key seen at
// t is reported seen for every later event with timestamp < t + W.
func TestShardNoFalseNegatives(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, Generations: 3, Capacity: 5_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(42, 43))
	last := map[int]time.Time{} // latest sighting event time per key
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := base
	for i := range 200_000 {
		now = now.Add(time.Duration(r.IntN(20)) * time.Millisecond)
		ts := now.Add(-time.Duration(r.IntN(5000)) * time.Millisecond) // up to 5 s late
		k := r.IntN(30_000)
		var kb [8]byte
		kb[0], kb[1], kb[2] = byte(k), byte(k>>8), byte(k>>16)
		seen := s.TestAndAdd(HashKey(kb[:]), ts)
		if lt, ok := last[k]; ok && ts.Before(lt.Add(cfg.Window)) && !seen {
			t.Fatalf("event %d: key %d seen at %v not reported at %v", i, k, lt, ts)
		}
		if lt, ok := last[k]; !ok || ts.After(lt) {
			last[k] = ts
		}
	}
	if st := s.Stats(); st.Stacks != 0 {
		t.Logf("overflow stacks: %d", st.Stacks)
	}
}

func TestShardFPR(t *testing.T) {
	for _, p := range []float64{0.01, 0.001} {
		cfg := Config{Window: 2 * time.Hour, Generations: 3, Capacity: 600_000, FPR: p}
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g := keyGen{seed: 100}
		// G full generations: the worst case just before a rotation.
		for i := uint64(0); i < 900_000; i++ {
			s.TestAndAdd(g.hash(i), at(time.Hour, 400_000+int64(i/300_000), 0))
		}
		fpr := measureFPR(s.Test, 101, 1_000_000)
		st := s.Stats()
		t.Logf("p=%g: %d generations, %d stacks, measured %.5f (%.3f× target), estimated %.5f, %.2f bits/key",
			p, len(st.Generations), st.Stacks, fpr, fpr/p, st.EstFPR, float64(st.Bytes*8)/900_000)
		if fpr > 1.1*p {
			t.Errorf("p=%g: shard FPR %.5f > 1.1 × target", p, fpr)
		}
		if st.Stacks != 0 || len(st.Generations) != 3 {
			t.Errorf("p=%g: %d generations, %d stacks; want 3, 0", p, len(st.Generations), st.Stacks)
		}
	}
}

func TestGenerationOverflowFPR(t *testing.T) {
	const n = 500_000
	for _, p := range []float64{0.01, 0.001} {
		k, nb, err := filterParams(n, subRate(p, 0))
		if err != nil {
			t.Fatal(err)
		}
		gen := newGeneration(1, 3600e9, 7200e9, n, p, newFilter(n, subRate(p, 0), k, nb))
		bpk := float64(gen.subs[0].Bits()) / n
		if r := bpk / classicBitsPerKey(p); r > 1.15 {
			t.Errorf("p=%g: planned %.2f bits/key = %.3f× classic, want ≤ 1.15", p, bpk, r)
		}
		g := keyGen{seed: 200}
		for i := uint64(0); i < 2*n; i++ {
			gen.testAndAdd(g.hash(i))
		}
		fpr := measureFPR(gen.test, 201, 1_000_000)
		st := gen.Stats()
		t.Logf("p=%g: 2× keys: %d stacks, sub-inserts %v, measured %.5f (%.3f× target), estimated %.5f, planned %.2f bits/key (%.3f× classic)",
			p, st.Stacks, gen.subInserts, fpr, fpr/p, st.EstFPR, bpk, bpk/classicBitsPerKey(p))
		if fpr > 1.1*p {
			t.Errorf("p=%g: FPR with 2× keys %.5f > 1.1 × target", p, fpr)
		}
		if st.Stacks != 1 || gen.subInserts[0] != n {
			t.Errorf("p=%g: stacks %d, first sub-filter inserts %d; want 1, %d", p, st.Stacks, gen.subInserts[0], n)
		}
	}
}

func TestSubRatesSumBelowBudget(t *testing.T) {
	sum := 0.0
	for i := range 20 { // beyond, rates are clamped at minSubRate
		sum += subRate(0.01, i)
	}
	if sum > 0.01 {
		t.Fatalf("sub-filter rates sum to %v > budget 0.01", sum)
	}
}
