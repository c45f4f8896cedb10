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
	for ci, tc := range evolveCases() {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewShard(tc.old)
			if err != nil {
				t.Fatal(err)
			}
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
			s = changePlan(t, s, tc.new)
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
