package bloom

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// changePlan checkpoints s (every generation of a snapshot, encoded and
// decoded) and restores it under cfg, as a restart with new settings does.
func changePlan(t *testing.T, s *Shard, cfg Config) *Shard {
	t.Helper()
	r, err := RestoreShard(cfg, decodeAll(t, encodeSnapshot(t, s)))
	if err != nil {
		t.Fatalf("restoring under %+v: %v", cfg, err)
	}
	return r
}

type evolveCase struct {
	name     string
	old, new Config
}

// evolveCases are the settings changes of docs/filter.md, "Changing the
// plan": both directions of the window, the generation count, capacity and
// rate. Capacity is per window, so it follows the window.
func evolveCases() []evolveCase {
	base := Config{Window: 24 * time.Hour, Generations: 4, Capacity: 3_000, FPR: 0.01}
	with := func(edit func(*Config)) Config { c := base; edit(&c); return c }
	w72 := with(func(c *Config) { c.Window, c.Capacity = 72*time.Hour, 9_000 })
	return []evolveCase{
		{"window 24h to 72h", base, w72},
		{"window 72h to 24h", w72, base},
		{"generations 4 to 2", base, with(func(c *Config) { c.Generations = 2 })},
		{"generations 2 to 8", with(func(c *Config) { c.Generations = 2 }), with(func(c *Config) { c.Generations = 8 })},
		{"capacity x10", base, with(func(c *Config) { c.Capacity *= 10 })},
		{"fpr 1% to 0.1%", base, with(func(c *Config) { c.FPR = 0.001 })},
	}
}

type evolveEvent struct {
	key int
	ts  time.Time
}

// evolveEvents is a deterministic stream from start to end: about 30
// events an hour, 10 % of them up to 3 h late, 40 % new keys, the rest a
// key seen before — half among the latest 200 keys, half from the whole
// history, so re-sightings span every age around both windows.
func evolveEvents(r *rand.Rand, next *int, start, end time.Time) []evolveEvent {
	var evs []evolveEvent
	for now := start; now.Before(end); now = now.Add(time.Duration(r.IntN(240)) * time.Second) {
		ts := now
		if r.IntN(10) == 0 {
			ts = now.Add(-time.Duration(r.IntN(3*3600)) * time.Second)
		}
		k := *next
		switch x := r.IntN(10); {
		case x < 4 || k == 0:
			*next++
		case x < 7:
			k -= 1 + r.IntN(min(k, 200))
		default:
			k = r.IntN(k)
		}
		evs = append(evs, evolveEvent{k, ts})
	}
	return evs
}

func evolveKey(k int) Hash {
	g := keyGen{seed: 700}
	return g.hash(uint64(k))
}

// TestShardEvolveNoFalseNegatives changes the plan of a filled shard (both
// directions of every setting) through a checkpoint, and checks the bounds
// of docs/filter.md on a stream with late events and re-sightings of every
// age:
//   - no false negative: a key last seen at t before the change (frontier
//     Tf) is reported seen while Tf − t < W_old and f − t < W_new (f: the
//     newest event time), hence for at least min(W_old, W_new); a key seen
//     after the change while f − t < W_new;
//   - each legacy generation is present exactly while f < End + W_new;
//   - once they are gone, memory is the new plan's: every generation sized
//     by it, at most G_new of them;
//   - a checkpoint written during the transition restores identically
//     (same answers, byte-identical generations at the end), and so does a
//     second restore of the pre-change checkpoint (replay after a crash
//     right after the change).
func TestShardEvolveNoFalseNegatives(t *testing.T) {
	for ci, tc := range evolveCases() {
		t.Run(tc.name, func(t *testing.T) {
			old, err := NewShard(tc.old)
			if err != nil {
				t.Fatal(err)
			}
			fresh, _ := NewShard(tc.new)
			oldSpan, newSpan := old.Span(), fresh.Span()
			r := rand.New(rand.NewPCG(uint64(ci), 77))
			t0 := time.Date(2026, 3, 1, 5, 17, 23, 0, time.UTC)
			tChange := t0.Add(2 * max(tc.old.Window, tc.new.Window))
			tEnd := tChange.Add(oldSpan + 2*tc.new.Window + 2*newSpan)
			next := 0
			pre := evolveEvents(r, &next, t0, tChange)
			post := evolveEvents(r, &next, tChange, tEnd)

			lastPre, lastPost := map[int]time.Time{}, map[int]time.Time{}
			var f time.Time // newest event time
			advance := func(ts time.Time) {
				if ts.After(f) {
					f = ts
				}
			}
			for i, e := range pre {
				advance(e.ts)
				seen := old.TestAndAdd(evolveKey(e.key), e.ts)
				if lt, ok := lastPre[e.key]; ok && f.Sub(lt) < tc.old.Window && !seen {
					t.Fatalf("before the change, event %d: key %d seen at %v not reported at frontier %v", i, e.key, lt, f)
				}
				if lt, ok := lastPre[e.key]; !ok || e.ts.After(lt) {
					lastPre[e.key] = e.ts
				}
			}
			tf := f

			s := changePlan(t, old, tc.new)
			replay := changePlan(t, old, tc.new)
			oldGens := len(old.Stats().Generations)
			var legacyEnds []time.Time
			for _, g := range s.Stats().Generations {
				if g.Legacy {
					legacyEnds = append(legacyEnds, g.End)
				}
			}
			if spanChanged := oldSpan != newSpan; spanChanged && len(legacyEnds) != oldGens || !spanChanged && len(legacyEnds) != 0 {
				t.Fatalf("span %v to %v: %d of %d generations legacy", oldSpan, newSpan, len(legacyEnds), oldGens)
			}
			wantLegacy := func() int {
				n := 0
				for _, end := range legacyEnds {
					if f.Before(end.Add(tc.new.Window)) {
						n++
					}
				}
				return n
			}

			var mid *Shard
			crossing := 0
			var (
				batch     []Hash
				batchTS   []time.Time
				batchSeen []bool
			)
			for i, e := range post {
				if i == len(post)/2 {
					mid = changePlan(t, s, tc.new)
					if a, b := s.Stats(), mid.Stats(); !reflect.DeepEqual(a, b) {
						t.Fatalf("checkpoint during the transition restores to\n%+v\nwant\n%+v", b, a)
					}
				}
				advance(e.ts)
				h := evolveKey(e.key)
				seen := s.TestAndAdd(h, e.ts)
				if mid != nil {
					if got := mid.TestAndAdd(h, e.ts); got != seen {
						t.Fatalf("event %d: restored mid-transition shard says %v, original %v", i, got, seen)
					}
				}
				batch, batchTS, batchSeen = append(batch, h), append(batchTS, e.ts), append(batchSeen, seen)
				if len(batch) == 37 || i == len(post)-1 {
					got := make([]bool, len(batch))
					replay.TestAndAddBatch(batch, batchTS, got)
					if !slices.Equal(got, batchSeen) {
						t.Fatalf("events up to %d: replayed restore says %v, original %v", i, got, batchSeen)
					}
					batch, batchTS, batchSeen = batch[:0], batchTS[:0], batchSeen[:0]
				}

				want := false
				if lt, ok := lastPost[e.key]; ok && f.Sub(lt) < tc.new.Window {
					want = true
				}
				if lt, ok := lastPre[e.key]; ok && tf.Sub(lt) < tc.old.Window && f.Sub(lt) < tc.new.Window {
					want = true
					if _, post := lastPost[e.key]; !post {
						crossing++
					}
				}
				if want && !seen {
					t.Fatalf("event %d: key %d (last seen before the change %v, after %v) not reported at frontier %v",
						i, e.key, lastPre[e.key], lastPost[e.key], f)
				}
				if lt, ok := lastPost[e.key]; !ok || e.ts.After(lt) {
					lastPost[e.key] = e.ts
				}
				if st := s.Stats(); st.Legacy != wantLegacy() {
					t.Fatalf("event %d at frontier %v: %d legacy generations, want %d (ends %v, window %v)",
						i, f, st.Legacy, wantLegacy(), legacyEnds, tc.new.Window)
				}
			}
			if crossing < 50 {
				t.Errorf("only %d lookups of keys seen before the change were checked after it", crossing)
			}

			st := s.Stats()
			planBytes := fresh.plan.nblocks * blockBits / 8
			if st.Legacy != 0 || len(st.Generations) > tc.new.Generations || st.Stacks != 0 {
				t.Fatalf("at the end: %d legacy, %d generations (G = %d), %d stacks", st.Legacy, len(st.Generations), tc.new.Generations, st.Stacks)
			}
			for _, g := range st.Generations {
				if g.Bytes != planBytes || g.End.Sub(g.Start) != newSpan {
					t.Errorf("generation %d [%v, %v): %d bytes, want the new plan's %d bytes and span %v", g.ID, g.Start, g.End, g.Bytes, planBytes, newSpan)
				}
			}
			if st.Bytes > uint64(tc.new.Generations)*planBytes {
				t.Errorf("memory %d bytes, new plan at most %d", st.Bytes, uint64(tc.new.Generations)*planBytes)
			}
			want := encodeSnapshot(t, s)
			for name, other := range map[string]*Shard{"mid-transition checkpoint": mid, "second restore of the pre-change checkpoint": replay} {
				got := encodeSnapshot(t, other)
				if len(got) != len(want) {
					t.Fatalf("%s: %d generations, want %d", name, len(got), len(want))
				}
				for i := range got {
					if !bytes.Equal(got[i], want[i]) {
						t.Errorf("%s: generation %d differs", name, i)
					}
				}
			}
			t.Logf("%d events before, %d after the change; %d lookups across it; %d legacy generations", len(pre), len(post), crossing, len(legacyEnds))
		})
	}
}

// TestShardLegacyEdges pins the legacy rules at their boundaries: the old
// plan's newest generation is sealed at the restore, the first timestamp
// opens a generation of the new plan, and a legacy generation answers until
// the instant event time reaches its End + the new window.
func TestShardLegacyEdges(t *testing.T) {
	oldCfg := Config{Window: 3 * time.Hour, Generations: 4, Capacity: 1_000, FPR: 0.01}  // span 1 h
	newCfg := Config{Window: 6 * time.Hour, Generations: 4, Capacity: 2_000, FPR: 0.01}  // span 2 h
	shorter := Config{Window: 2 * time.Hour, Generations: 3, Capacity: 1_000, FPR: 0.01} // span 1 h: no legacy
	const s0 = 480_001                                                                   // an odd hour, inside a 2-hour span
	hour := time.Hour
	early, late, other := HashKey([]byte("early")), HashKey([]byte("late")), HashKey([]byte("other"))

	old, _ := NewShard(oldCfg)
	old.TestAndAdd(early, at(hour, s0, 10*time.Minute))
	old.TestAndAdd(late, at(hour, s0+1, 50*time.Minute)) // live generation [s0+1 h, s0+2 h)

	t.Run("sealed at restore, dropped at End + window", func(t *testing.T) {
		s := changePlan(t, old, newCfg)
		if st := s.Stats(); st.Legacy != 2 || len(st.Generations) != 2 {
			t.Fatalf("restored %+v, want 2 legacy generations and no ring", st)
		}
		// Inside the old live generation's span: goes to a new-plan
		// generation, the legacy one stays as it was.
		if s.TestAndAdd(other, at(hour, s0+1, 55*time.Minute)) {
			t.Fatal("fresh key reported seen")
		}
		st := s.Stats()
		if n := len(st.Generations); n != 3 || st.Generations[1].Inserts != 1 || st.Generations[2].Legacy ||
			!st.Generations[2].Start.Equal(at(hour, s0+1, 0)) || st.Generations[2].End.Sub(st.Generations[2].Start) != 2*hour {
			t.Fatalf("after the first insert: %+v", st.Generations)
		}
		// early: generation [s0, s0+1 h) leaves at s0+1 h + 6 h.
		s.Advance(at(hour, s0+7, -1))
		if !s.Test(early) || !s.Test(late) {
			t.Fatal("legacy keys forgotten before End + window")
		}
		s.Advance(at(hour, s0+7, 0))
		if s.Test(early) || !s.Test(late) || s.Stats().Legacy != 1 {
			t.Fatalf("at End + window of the first legacy generation: early %v, late %v, %d legacy", s.Test(early), s.Test(late), s.Stats().Legacy)
		}
		// late: seen at s0+1 h 50 m, remembered for more than 6 h after.
		s.Advance(at(hour, s0+8, -1))
		if !s.Test(late) {
			t.Fatal("late key forgotten before End + window")
		}
		s.Advance(at(hour, s0+8, 0))
		if s.Test(late) || s.Stats().Legacy != 0 {
			t.Fatal("legacy generation kept past End + window")
		}
	})

	t.Run("a late event does not drop legacy generations", func(t *testing.T) {
		s := changePlan(t, old, newCfg)
		s.TestAndAdd(other, at(hour, s0+9, 0)) // both leave
		if s.Stats().Legacy != 0 {
			t.Fatal("legacy generations survived a timestamp past End + window")
		}
		s = changePlan(t, old, newCfg)
		s.TestAndAdd(other, at(hour, s0-30, 0)) // late: nothing leaves
		if s.Stats().Legacy != 2 || !s.Test(early) {
			t.Fatal("a late event dropped legacy generations")
		}
	})

	t.Run("a window decrease drops what left the new window at the first event", func(t *testing.T) {
		s := changePlan(t, old, Config{Window: 90 * time.Minute, Generations: 4, Capacity: 500, FPR: 0.01}) // span 30 m
		if s.Stats().Legacy != 2 {
			t.Fatal("restore dropped legacy generations without an event")
		}
		s.Advance(at(hour, s0+2, 30*time.Minute)) // [s0, s0+1 h) + 1.5 h
		if s.Test(early) || !s.Test(late) || s.Stats().Legacy != 1 {
			t.Fatal("window decrease: wrong legacy generations left")
		}
	})

	t.Run("same span: the ring carries on", func(t *testing.T) {
		s := changePlan(t, old, shorter)
		st := s.Stats()
		if st.Legacy != 0 || len(st.Generations) != 2 {
			t.Fatalf("same span restored as %+v", st)
		}
		// The newest generation keeps its own plan and receives inserts.
		s.TestAndAdd(other, at(hour, s0+1, 55*time.Minute))
		if st := s.Stats(); len(st.Generations) != 2 || st.Generations[1].Inserts != 2 {
			t.Fatalf("after an insert in the live span: %+v", st.Generations)
		}
	})

	t.Run("restore ignores legacy generations the shard dropped", func(t *testing.T) {
		s := changePlan(t, old, newCfg)
		s.TestAndAdd(other, at(hour, s0+7, 0)) // drops [s0, s0+1 h)
		gens := decodeAll(t, encodeSnapshot(t, s))
		// Add back the dropped one, as from an older checkpoint.
		gens = append(gens, decodeAll(t, encodeSnapshot(t, old))[0])
		r, err := RestoreShard(newCfg, gens)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Stats(), s.Stats()) {
			t.Fatalf("restored %+v\nwant %+v", r.Stats(), s.Stats())
		}
	})
}

// TestShardEvolveFPR measures the false-positive rate on never-added keys
// across a change, and checks it against docs/filter.md: at most
// 1 − (1 − p_old)(1 − p_new) while old generations remain (at most
// max(p_old, p_new) when span and G are unchanged), and the new target once
// they are gone.
func TestShardEvolveFPR(t *testing.T) {
	for _, tc := range evolveCases() {
		tc.old.Capacity *= 10
		tc.new.Capacity *= 10
		t.Run(tc.name, func(t *testing.T) {
			s, _ := NewShard(tc.old)
			fresh, _ := NewShard(tc.new)
			sameRing := s.Span() == fresh.Span() && tc.old.Generations == tc.new.Generations
			// Keys arrive at the planned rate: Capacity per window (so ten
			// times as many after "capacity x10").
			perHour := func(c Config) uint64 { return c.Capacity / uint64(c.Window/time.Hour) }
			g := keyGen{seed: 800}
			next := uint64(0)
			now := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC)
			fill := func(c Config, until time.Time) {
				for ; now.Before(until); now = now.Add(time.Hour) {
					for range perHour(c) {
						s.TestAndAdd(g.hash(next), now)
						next++
					}
				}
			}
			fill(tc.old, now.Add(2*tc.old.Window))
			s = changePlan(t, s, tc.new)
			bound := 1 - (1-tc.old.FPR)*(1-tc.new.FPR)
			if sameRing {
				bound = max(tc.old.FPR, tc.new.FPR)
			}
			peak := 0.0
			for step := 0; ; step++ {
				st := s.Stats()
				fpr := measureFPR(s.Test, 801+uint64(step), 100_000)
				t.Logf("%3.0f h after the change: %d legacy + %d ring generations, measured %.4f %%, estimated %.4f %%",
					float64(step*8), st.Legacy, len(st.Generations)-st.Legacy, 100*fpr, 100*st.EstFPR)
				peak = max(peak, fpr)
				if fpr > 1.1*bound {
					t.Errorf("measured %.5f > 1.1 × bound %.5f", fpr, bound)
				}
				if st.Legacy == 0 && step*8 >= int((tc.new.Window+fresh.Span())/time.Hour) {
					if fpr > 1.1*tc.new.FPR {
						t.Errorf("after the transition: measured %.5f > 1.1 × target %.5f", fpr, tc.new.FPR)
					}
					break
				}
				fill(tc.new, now.Add(8*time.Hour))
			}
			t.Logf("peak %.4f %% (bound %.4f %%, new target %.4f %%)", 100*peak, 100*bound, 100*tc.new.FPR)
		})
	}
}
