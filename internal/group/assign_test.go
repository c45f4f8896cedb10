package group

import (
	"fmt"
	"slices"
	"testing"
)

func members(owned ...[]int) []MemberInfo {
	out := make([]MemberInfo, len(owned))
	for i, o := range owned {
		out[i] = MemberInfo{ID: fmt.Sprintf("m%d", i), Owned: o}
	}
	return out
}

// checkPlan: every partition at most once; each admitted member within
// one of the others; with cooperative, no partition given to a member
// other than its owner.
func checkPlan(t *testing.T, all []MemberInfo, plan map[string][]int, n int, cooperative bool) {
	t.Helper()
	seen := map[int]string{}
	owner := map[int]string{}
	for _, m := range all {
		for _, p := range m.Owned {
			if _, ok := owner[p]; !ok {
				owner[p] = m.ID
			}
		}
	}
	lo, hi := n, 0
	for id, ps := range plan {
		lo, hi = min(lo, len(ps)), max(hi, len(ps))
		for _, p := range ps {
			if p < 0 || p >= n {
				t.Errorf("%s got partition %d of %d", id, p, n)
			}
			if other, dup := seen[p]; dup {
				t.Errorf("partition %d to %s and %s", p, other, id)
			}
			seen[p] = id
			if o, ok := owner[p]; cooperative && ok && o != id {
				t.Errorf("cooperative: partition %d owned by %s assigned to %s in the same rebalance", p, o, id)
			}
		}
	}
	if !cooperative && len(seen) != n {
		t.Errorf("eager: %d of %d partitions assigned", len(seen), n)
	}
	if len(plan) > 0 && hi-lo > 1 && !cooperative {
		t.Errorf("eager: unbalanced, %d to %d partitions per member", lo, hi)
	}
}

func TestAssignBalancedFromScratch(t *testing.T) {
	for _, coop := range []bool{true, false} {
		all := members(nil, nil, nil)
		plan := assign(all, all, 8, coop)
		checkPlan(t, all, plan, 8, coop)
		var sizes []int
		for _, m := range all {
			sizes = append(sizes, len(plan[m.ID]))
		}
		slices.Sort(sizes)
		if !slices.Equal(sizes, []int{2, 3, 3}) {
			t.Errorf("cooperative=%v: sizes %v, want 2,3,3", coop, sizes)
		}
	}
}

// TestAssignSticky: a member joining takes partitions only from those over
// their share; the others keep what they own, and with cooperative the
// moved ones are not assigned in this round.
func TestAssignSticky(t *testing.T) {
	all := members([]int{0, 1, 2, 3}, []int{4, 5, 6, 7}, nil)
	plan := assign(all, all, 8, true)
	checkPlan(t, all, plan, 8, true)
	keptA, keptB := len(plan["m0"]), len(plan["m1"])
	if keptA < 2 || keptB < 2 || keptA+keptB != 6 {
		t.Errorf("owners keep %v and %v, want 3+3 of their own", plan["m0"], plan["m1"])
	}
	if len(plan["m2"]) != 0 {
		t.Errorf("cooperative: the new member got %v in the first round, want nothing yet", plan["m2"])
	}
	// Round two: the owners gave up what they lost.
	all = members(plan["m0"], plan["m1"], nil)
	plan2 := assign(all, all, 8, true)
	checkPlan(t, all, plan2, 8, true)
	if len(plan2["m2"]) != 2 || !slices.Equal(plan2["m0"], plan["m0"]) || !slices.Equal(plan2["m1"], plan["m1"]) {
		t.Errorf("round two: %v", plan2)
	}
	// Eager: in one round.
	all = members([]int{0, 1, 2, 3}, []int{4, 5, 6, 7}, nil)
	plan3 := assign(all, all, 8, false)
	checkPlan(t, all, plan3, 8, false)
	if len(plan3["m2"]) != 2 {
		t.Errorf("eager: the new member got %v", plan3["m2"])
	}
}

// TestAssignMemberLeaves: the partitions of a member that left go to the
// others; nobody loses what it owns.
func TestAssignMemberLeaves(t *testing.T) {
	all := members([]int{0, 1, 2}, []int{3, 4, 5})
	plan := assign(all, all, 9, true)
	checkPlan(t, all, plan, 9, true)
	for id, kept := range map[string][]int{"m0": {0, 1, 2}, "m1": {3, 4, 5}} {
		for _, p := range kept {
			if !slices.Contains(plan[id], p) {
				t.Errorf("%s lost partition %d it owns: %v", id, p, plan)
			}
		}
	}
	if len(plan["m0"])+len(plan["m1"]) != 9 {
		t.Errorf("not every free partition assigned: %v", plan)
	}
}

// TestAssignNotAdmitted: a member that is not admitted gets nothing; what
// it owns is not assigned to others until it gave it up (cooperative).
func TestAssignNotAdmitted(t *testing.T) {
	all := members([]int{0, 1}, []int{2, 3})
	plan := assign(all, all[:1], 4, true)
	if len(plan["m1"]) != 0 || !slices.Equal(plan["m0"], []int{0, 1}) {
		t.Errorf("plan %v", plan)
	}
	plan = assign(members([]int{0, 1}, nil), members([]int{0, 1}), 4, true)
	if !slices.Equal(plan["m0"], []int{0, 1, 2, 3}) {
		t.Errorf("after the refused member gave up its partitions: %v", plan)
	}
}

// TestAssignDeterministic: the plan does not depend on the order members
// are listed in.
func TestAssignDeterministic(t *testing.T) {
	all := members([]int{5}, []int{1, 2}, nil, []int{0})
	a := assign(all, all, 7, true)
	rev := slices.Clone(all)
	slices.Reverse(rev)
	b := assign(rev, rev, 7, true)
	for id := range a {
		if !slices.Equal(a[id], b[id]) {
			t.Errorf("%s: %v vs %v", id, a[id], b[id])
		}
	}
}
