package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// simMember is a member of a simulated group: honest members claim what
// they hold; liars claim anything (partitions the topic does not have,
// twice, of generations that were not or are not theirs) and hold what
// they are given; foreign members are never admitted.
type simMember struct {
	id      string
	liar    bool
	foreign bool
	holds   []int // running now
	gen     int32 // the generation holds is from
}

// TestLyingClaims runs random groups with lying members (and followers
// that miss a sync) through generations of the leader's assignment and
// checks, in every generation: no partition is given to one member while
// an honest one still runs it; and from the third generation after the
// liars joined, a partition left unassigned is one a member runs and is
// to give up, never one held up by a lie.
func TestLyingClaims(t *testing.T) {
	const sets = 10000
	r := rand.New(rand.NewPCG(41, 1))
	for i := range sets {
		if !simulate(t, r, i) {
			return
		}
	}
}

func simulate(t *testing.T, r *rand.Rand, set int) bool {
	n := 1 + r.IntN(12)
	gen := int32(1 + r.IntN(50))
	var ms []*simMember
	honest := 1 + r.IntN(4)
	for i := range honest + r.IntN(4) + r.IntN(3) {
		m := &simMember{id: fmt.Sprintf("%c-%d", 'a'+r.IntN(26), i), gen: gen}
		switch {
		case i >= honest+2:
			m.foreign = true
		case i >= honest:
			m.liar = true
		}
		ms = append(ms, m)
	}
	// The honest members hold a random split of the partitions (some
	// held by nobody), from generation gen.
	for p := range n {
		if k := r.IntN(honest + 1); k < honest {
			ms[k].holds = append(ms[k].holds, p)
		}
	}
	var plans []*plan
	if r.IntN(2) == 0 { // the leader led gen: its plan is the truth
		last := &plan{gen: gen, owner: map[int]string{}, instance: map[string]string{}}
		for _, m := range ms {
			for _, p := range m.holds {
				last.owner[p] = m.id
			}
		}
		plans = append(plans, last)
	}
	cooperative := r.IntN(3) > 0
	for step := 1; step <= 4; step++ {
		gen++
		// Eager: every honest member gave everything up before joining
		// (announcing it), except in the generation that turned the group
		// eager (transition), where they hold it until they sync.
		transition := !cooperative && step == 1 && r.IntN(2) == 0
		var all, admitted []MemberInfo
		for _, m := range ms {
			mi := MemberInfo{ID: m.id, Owned: slices.Clone(m.holds), Generation: m.gen}
			if m.liar || m.foreign {
				mi.Owned, mi.Generation = lie(r, n, gen)
				if r.IntN(3) == 0 { // and sometimes claims what it was given, too
					mi.Owned = append(mi.Owned, m.holds...)
					slices.Sort(mi.Owned)
				}
				if r.IntN(6) == 0 { // or sends metadata that does not decode (leaderAssign)
					mi = MemberInfo{ID: m.id, Generation: noGeneration, undecodable: true}
				}
			}
			all = append(all, mi)
		}
		// Partitions honest members run during the rebalance (a liar runs
		// what it was given, but what it claims is its own affair).
		live := map[int]string{}
		for _, m := range ms {
			if (cooperative || transition) && !m.liar && !m.foreign {
				for _, p := range m.holds {
					live[p] = m.id
				}
			}
		}
		vetted, _, contested, confirmed := vetClaims(all, n, gen, plans)
		for _, mi := range vetted {
			if !mi.undecodable && !ms[slices.IndexFunc(ms, func(m *simMember) bool { return m.id == mi.ID })].foreign {
				admitted = append(admitted, mi)
			}
		}
		withContested := vetted
		if len(contested) > 0 {
			withContested = append(slices.Clone(vetted), MemberInfo{ID: contestedMember, Owned: contested})
		}
		out := assign(withContested, admitted, n, cooperative || transition)
		given := map[int]string{}
		for id, ps := range out {
			for _, p := range ps {
				if other, ok := given[p]; ok {
					t.Errorf("set %d generation %d: partition %d given to %s and %s", set, gen, p, other, id)
					return false
				}
				given[p] = id
				if holder, ok := live[p]; ok && holder != id {
					t.Errorf("set %d generation %d (cooperative %v, transition %v, plans %d): partition %d given to %s while %s runs it\nclaims %+v",
						set, gen, cooperative, transition, len(plans), p, id, holder, all)
					return false
				}
			}
		}
		// A partition left unassigned is one a member runs and is to give
		// up (the cooperative protocol's second step; the leader rejoins
		// after a rebalance timeout for one that does not), or held up by
		// a claim the leader could not confirm (it rejoins at once). Lies
		// hold up a partition nobody runs for at most two generations: one
		// that leaves it unassigned, one more for a lie the plans cannot
		// judge yet or a member that missed its sync.
		for p := range n {
			if _, ok := given[p]; ok {
				continue
			}
			if slices.ContainsFunc(ms, func(m *simMember) bool {
				return slices.Contains(m.holds, p) && (cooperative || transition || m.liar)
			}) {
				continue // its owner is to give it up (a liar may not: the leader rejoins after a rebalance timeout)
			}
			if step >= 3 {
				t.Errorf("set %d generation %d step %d (cooperative %v, transition %v, plans %d, confirmed %v): partition %d unassigned, run by nobody: %v\nclaims %+v",
					set, gen, step, cooperative, transition, len(plans), confirmed, p, out, all)
				return false
			}
		}
		// Members run what they were given (an honest member gives up what
		// it was not given), but in the first generation a follower may
		// miss its sync (another rebalance began): it keeps what it ran,
		// from its generation (eager: nothing, it gave it up to join). The
		// leader synced and led this generation.
		for i, m := range ms {
			if step == 1 && i > 0 && !m.liar && !m.foreign && r.IntN(4) == 0 {
				if !cooperative {
					m.holds = nil
				}
				continue
			}
			m.holds, m.gen = slices.Clone(out[m.id]), gen
		}
		plans = append(plans, newPlan(gen, vetted, out))
		if len(plans) > maxPlans {
			plans = plans[1:]
		}
	}
	return true
}

// lie returns claims a liar might send.
func lie(r *rand.Rand, n int, gen int32) ([]int, int32) {
	var ps []int
	for range r.IntN(n + 4) {
		ps = append(ps, r.IntN(n+6)-3)
	}
	if r.IntN(4) == 0 && len(ps) > 0 {
		ps = append(ps, ps[0]) // twice
	}
	slices.Sort(ps)
	gens := []int32{noGeneration, gen - 4, gen - 3, gen - 2, gen - 1, gen, gen + 3}
	return ps, gens[r.IntN(len(gens))]
}
