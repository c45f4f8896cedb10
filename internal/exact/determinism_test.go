package exact

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

// model is the specification: a set of (generation, hash) with a floor.
type model struct {
	floor uint64
	set   map[entry]bool
}

func (m *model) add(g uint64, h Hash) { m.set[makeEntry(g, h)] = true }
func (m *model) has(g uint64, h Hash) bool {
	return g >= m.floor && m.set[makeEntry(g, h)]
}

func (m *model) contains(h Hash, gens []uint64) bool {
	for _, g := range gens {
		if m.has(g, h) {
			return true
		}
	}
	return false
}

// TestDeterminism applies one random sequence of adds, rotations and drops
// to stores whose flushes, merges and checkpoints differ
// (one of them is replaced by a restore of its own checkpoint now and
// then), and checks every answer against the model: answers depend on the
// sequence only.
func TestDeterminism(t *testing.T) {
	for seed := range uint64(3) {
		t.Run("", func(t *testing.T) { checkDeterminism(t, seed) })
	}
}

func checkDeterminism(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	type variant struct {
		name string
		opts Options
		// disturb runs between operations: flushes, merges, restores.
		disturb func(t *testing.T, s **Store, rng *rand.Rand)
	}
	b := newBucket()
	variants := []variant{
		{"plain", Options{}, nil},
		{"small flushes, extra flushes and full merges", Options{FlushKeys: 3},
			func(t *testing.T, s **Store, rng *rand.Rand) {
				switch rng.IntN(200) {
				case 0:
					(*s).mu.Lock()
					err := (*s).flushLocked()
					(*s).mu.Unlock()
					if err != nil {
						t.Fatal(err)
					}
				case 1:
					if err := (*s).mergeAll(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}},
		{"restored from its checkpoints", Options{FlushKeys: 50},
			func(t *testing.T, s **Store, rng *rand.Rand) {
				if rng.IntN(400) != 0 {
					return
				}
				sn := checkpointT(t, *s)
				b.upload(t, sn)
				if err := (*s).Close(); err != nil {
					t.Fatal(err)
				}
				// A fresh directory each time: nothing local survives.
				*s = restoreT(t, filepath.Join(t.TempDir(), "r"), sn.Files, b, Options{FlushKeys: 50})
			}},
	}
	stores := make([]*Store, len(variants))
	for i, v := range variants {
		stores[i] = openT(t, t.TempDir(), v.opts)
	}
	m := &model{set: make(map[entry]bool)}
	const G = 4
	gen := uint64(1000)
	gens := []uint64{gen}
	pool := func() Hash { return hashN(seed, uint64(rng.IntN(3000))) }
	check := func(step int) {
		for range 60 {
			h := pool()
			g := gens[rng.IntN(len(gens))]
			if rng.IntN(4) == 0 {
				g = m.floor - 1 // dropped
			}
			want, wantAny := m.has(g, h), m.contains(h, gens)
			for i, s := range stores {
				if got := mustHas(t, s, g, h); got != want {
					t.Fatalf("step %d, %s: Has(%d, …) = %v, model %v", step, variants[i].name, g, got, want)
				}
				if got := mustContain(t, s, h); got != wantAny {
					t.Fatalf("step %d, %s: Contains = %v, model %v", step, variants[i].name, got, wantAny)
				}
			}
		}
	}
	for step := range 5000 {
		switch r := rng.IntN(100); {
		case r == 0: // rotation: a new generation, the oldest beyond G dropped
			gen += uint64(1 + rng.IntN(3))
			gens = append(gens, gen)
			if len(gens) > G {
				gens = gens[len(gens)-G:]
				m.floor = gens[0]
				for _, s := range stores {
					if err := s.DropBefore(m.floor); err != nil {
						t.Fatal(err)
					}
				}
			}
		case r < 3:
			check(step)
		default:
			h := pool()
			m.add(gen, h)
			for _, s := range stores {
				mustAdd(t, s, gen, h)
			}
		}
		for i, v := range variants {
			if v.disturb != nil {
				v.disturb(t, &stores[i], rng)
			}
		}
	}
	check(-1)
	var want []uint64 // generations ≥ floor that received an add
	for _, g := range gens {
		for k := range m.set {
			if k.gen == g {
				want = append(want, g)
				break
			}
		}
	}
	for i, s := range stores {
		if got := s.Generations(); !slices.Equal(got, want) {
			t.Errorf("%s: Generations = %v, model %v", variants[i].name, got, want)
		}
	}
}
