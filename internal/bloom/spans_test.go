package bloom

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSpansChangesMatching runs streams with late events and re-sightings
// through every change of plan of evolveCases (legacy generations included)
// and checks what an exact store behind the filter relies on:
//   - Spans changes in a TestAndAdd exactly when Changes reported true for
//     its timestamp before the call, and its spans are distinct;
//   - Matching lists, newest first, every generation whose filter reports
//     the key, the newest (just added to) included, and at least every
//     generation that the key was really added to and that is still held
//     (a model per span).
func TestSpansChangesMatching(t *testing.T) {
	testSpansChangesMatching(t, func(t *testing.T, cfg Config) spanShard {
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, func(t *testing.T, s spanShard, cfg Config) spanShard { return changePlan(t, s.(*Shard), cfg) })
}

// TestFingerprintSpansChangesMatching is TestSpansChangesMatching for the
// fingerprint kind: the same stream, the same changes of plan (legacy
// tables), and a plan small enough that its tables overflow.
func TestFingerprintSpansChangesMatching(t *testing.T) {
	forLayouts(t, func(t *testing.T) {
		testSpansChangesMatching(t, func(t *testing.T, cfg Config) spanShard {
			s, err := NewFingerprintShard(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, func(t *testing.T, s spanShard, cfg Config) spanShard {
			if st := s.(*FingerprintShard).Stats(); cfg.Capacity == 60 && st.Overflow == 0 {
				t.Errorf("the small plan's stream overflowed no table: %+v", st)
			}
			r, err := RestoreFingerprintShard(cfg, decodeTables(t, encodeTables(t, s.(*FingerprintShard))))
			if err != nil {
				t.Fatalf("restoring under %+v: %v", cfg, err)
			}
			return r
		})
	})
}

// spanShard is what an exact store behind a filter uses of it.
type spanShard interface {
	Spans([]Span) []Span
	Changes(time.Time) bool
	Matching(Hash, []int) []int
	TestAndAdd(Hash, time.Time) bool
}

func testSpansChangesMatching(t *testing.T, newShard func(*testing.T, Config) spanShard, change func(*testing.T, spanShard, Config) spanShard) {
	small := Config{Window: 24 * time.Hour, Generations: 4, Capacity: 60, FPR: 0.01}
	cases := append(evolveCases(), evolveCase{"overflowing tables", small, small})
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newShard(t, tc.old)
			r := rand.New(rand.NewPCG(uint64(ci), 91))
			t0 := time.Date(2026, 3, 1, 5, 17, 23, 0, time.UTC)
			tChange := t0.Add(2 * max(tc.old.Window, tc.new.Window))
			tEnd := tChange.Add(3 * tc.new.Window)
			next := 0
			pre := evolveEvents(r, &next, t0, tChange)
			post := evolveEvents(r, &next, tChange, tEnd)

			in := map[Span]map[int]bool{} // keys added to each generation
			var spans []Span
			var match []int
			changes := 0
			run := func(evs []evolveEvent) {
				for i, e := range evs {
					h := evolveKey(e.key)
					before := s.Spans(nil)
					want := s.Changes(e.ts)
					s.TestAndAdd(h, e.ts)
					spans = s.Spans(spans[:0])
					if got := !slices.Equal(before, spans); got != want {
						t.Fatalf("event %d at %v: Changes said %v, spans changed: %v (%v → %v)", i, e.ts, want, got, before, spans)
					}
					if want {
						changes++
					}
					held := map[Span]bool{}
					for _, sp := range spans {
						if held[sp] {
							t.Fatalf("span %v listed twice: %v", sp, spans)
						}
						held[sp] = true
					}
					for sp := range in {
						if !held[sp] {
							delete(in, sp)
						}
					}
					newest := spans[len(spans)-1]
					if in[newest] == nil {
						in[newest] = map[int]bool{}
					}
					in[newest][e.key] = true

					match = s.Matching(h, match[:0])
					if len(match) == 0 || match[0] != len(spans)-1 {
						t.Fatalf("event %d: Matching %v does not start with the newest generation %d", i, match, len(spans)-1)
					}
					for j := 1; j < len(match); j++ {
						if match[j] >= match[j-1] {
							t.Fatalf("event %d: Matching %v not newest first", i, match)
						}
					}
					for pos, sp := range spans {
						if in[sp][e.key] && !slices.Contains(match, pos) {
							t.Fatalf("event %d: key %d is in generation %v, Matching %v misses position %d", i, e.key, sp, match, pos)
						}
					}
				}
			}
			run(pre)
			s = change(t, s, tc.new)
			// RestoreShard may drop generations; the model follows Spans.
			run(post)
			if changes < 4 {
				t.Errorf("only %d changes of generations: the stream does not rotate", changes)
			}
		})
	}
}

func TestChangesEmptyShard(t *testing.T) {
	s, err := NewShard(Config{Window: time.Hour, Generations: 2, Capacity: 10, FPR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Changes(time.Unix(0, 0)) {
		t.Error("an empty shard's first key opens a generation: Changes must report it")
	}
	if got := s.Spans(nil); len(got) != 0 {
		t.Errorf("Spans of an empty shard: %v", got)
	}
}
