package group

import (
	"cmp"
	"fmt"
	"slices"
)

// MemberInfo is one member of a rebalance as the leader sees it.
type MemberInfo struct {
	ID         string
	InstanceID string // "" for a dynamic member
	// UserData is what the member announced (Config.UserData).
	UserData []byte
	// Owned are the partitions of the topic the member claims to have had
	// in its last generation, sorted; Generation is that generation
	// (noGeneration: not said).
	Owned      []int
	Generation int32

	undecodable bool // its subscription is not the consumer protocol
}

// plan is an assignment a leader handed out.
type plan struct {
	gen      int32
	owner    map[int]string    // partition: member ID
	instance map[string]string // member ID: instance ID, of static members
}

func newPlan(gen int32, all []MemberInfo, assignment map[string][]int) *plan {
	pl := &plan{gen: gen, owner: map[int]string{}, instance: map[string]string{}}
	for _, m := range all {
		if m.InstanceID != "" {
			pl.instance[m.ID] = m.InstanceID
		}
	}
	for id, ps := range assignment {
		for _, p := range ps {
			pl.owner[p] = id
		}
	}
	return pl
}

// gave reports whether the plan gave p to m: to its member ID, or to its
// instance ID (a static member restarted under a new member ID).
func (pl *plan) gave(p int, m MemberInfo) bool {
	id, ok := pl.owner[p]
	if !ok {
		return false
	}
	return id == m.ID || m.InstanceID != "" && pl.instance[id] == m.InstanceID
}

// droppedClaim is a member's claim that does not count, and why.
type droppedClaim struct {
	member     string
	partitions []int
	why        string
}

// vetClaims returns the members with only the claims that count: of
// partitions in [0, n), of a generation before gen, checked against plans,
// the assignments this leader handed out in the generations it led last
// (oldest first, consecutive), and each partition claimed once.
//
// A claim from a generation the leader led counts only where that
// generation's assignment gave the partition to that member. A member
// whose sync failed claims from the generation before: it still runs
// what that one gave it, so a claim with one plan after its generation
// counts where that plan did not give the partition to another member (it
// would not have, while the member claimed it), and one with two or more
// plans after it does not count (the member would have synced one). A
// claim no plan judges (no plans, or a generation after the newest one:
// the leader missed one) is unverified. Of the claims left,
// the newest generation's counts (as KIP-792 has it); a partition several
// members claim from one generation goes to nobody in this generation
// (contested): the holder sees it missing and gives it up, and the next
// generation, led with a plan, assigns it. confirmed: no unverified claim
// counts and none is contested.
func vetClaims(all []MemberInfo, n int, gen int32, plans []*plan) (vetted []MemberInfo, dropped []droppedClaim, contested []int, confirmed bool) {
	v := &claimVet{n: n, gen: gen, plans: plans}
	vetted = slices.Clone(all)
	slices.SortFunc(vetted, func(a, b MemberInfo) int { return cmp.Compare(a.ID, b.ID) })
	confirmed = true
	for i := range vetted {
		m := &vetted[i]
		var verified bool
		m.Owned, verified = v.member(*m)
		confirmed = confirmed && verified
	}
	contested = v.newestClaims(vetted)
	return vetted, v.dropped, contested, confirmed && len(contested) == 0
}

// claimVet is one vetClaims: the partition count, the generation being
// formed, the leader's plans, and the claims dropped so far.
type claimVet struct {
	n       int
	gen     int32
	plans   []*plan
	dropped []droppedClaim
}

func (v *claimVet) drop(m MemberInfo, ps []int, why string) {
	if len(ps) > 0 {
		v.dropped = append(v.dropped, droppedClaim{member: m.ID, partitions: ps, why: why})
	}
}

func (v *claimVet) planOf(g int32) *plan {
	for _, pl := range v.plans {
		if pl.gen == g {
			return pl
		}
	}
	return nil
}

// member returns the claims of m that its generation and the plans allow;
// verified is false when a claim counts that no plan judged.
func (v *claimVet) member(m MemberInfo) (owned []int, verified bool) {
	owned = slices.Compact(slices.Clone(m.Owned))
	lo, _ := slices.BinarySearch(owned, 0)
	hi, _ := slices.BinarySearch(owned, v.n)
	v.drop(m, append(slices.Clone(owned[:lo]), owned[hi:]...), fmt.Sprintf("the topic has no such partitions (it has %d)", v.n))
	owned = owned[lo:hi]
	claimGen := m.Generation
	if claimGen == noGeneration && len(v.plans) > 0 {
		claimGen = v.plans[len(v.plans)-1].gen // a member that does not say: judged by the newest plan
	}
	pl := v.planOf(claimGen)
	var after []*plan // plans of generations after the claim's
	for _, q := range v.plans {
		if q.gen > claimGen {
			after = append(after, q)
		}
	}
	switch {
	case len(owned) == 0:
		return owned, true
	case m.Generation != noGeneration && m.Generation >= v.gen:
		v.drop(m, owned, fmt.Sprintf("they are claimed from generation %d, which has not been", m.Generation))
		return nil, true
	case len(after) >= 2:
		v.drop(m, owned, fmt.Sprintf("they are claimed from generation %d, and the member was assigned twice since", m.Generation))
		return nil, true
	}
	var kept, not []int
	for _, p := range owned {
		switch {
		case pl != nil && !pl.gave(p, m):
			not = append(not, p)
		case len(after) == 1 && after[0].owner[p] != "" && !after[0].gave(p, m):
			// The member missed the one assignment since (its
			// sync failed), which would not have given the
			// partition to another member while it claimed it.
			not = append(not, p)
		default:
			kept = append(kept, p)
		}
	}
	v.drop(m, not, "the generations this member led did not give them to it")
	return kept, pl != nil || len(kept) == 0 // else no plan judges them
}

// newestClaims keeps, of the vetted claims, the newest of each partition;
// it returns the partitions claimed by several members from the newest
// generation that claims them (contested), which go to nobody.
func (v *claimVet) newestClaims(vetted []MemberInfo) (contested []int) {
	newestClaim := map[int]int{} // partition: index in vetted, -1-i when contested
	genOf := func(j int) int32 {
		if j < 0 {
			j = -1 - j
		}
		return vetted[j].Generation
	}
	for i, m := range vetted {
		for _, p := range m.Owned {
			j, ok := newestClaim[p]
			switch {
			case !ok || genOf(j) < m.Generation:
				newestClaim[p] = i
			case genOf(j) == m.Generation:
				newestClaim[p] = -1 - i
			}
		}
	}
	for i := range vetted {
		m := &vetted[i]
		var kept, not []int
		for _, p := range m.Owned {
			if newestClaim[p] == i {
				kept = append(kept, p)
			} else {
				not = append(not, p)
			}
		}
		v.drop(*m, not, "another member claims them from a newer generation, or from the same one")
		m.Owned = kept
	}
	for p, j := range newestClaim {
		if j < 0 {
			contested = append(contested, p)
		}
	}
	slices.Sort(contested)
	return contested
}

// contestedMember holds, in assign's view, the partitions two members
// claim from one generation: owned by a member that is never admitted,
// they go to nobody in a cooperative assignment.
const contestedMember = "\x00contested"

// assign computes the assignment of the partitions [0, n) of the topic to
// admitted, the members that may get partitions, knowing every member of
// the rebalance (all, admitted ones included) and what each owns. It is
// sticky and balanced: every admitted member gets n/len(admitted)
// partitions or one more, keeps as many of those it owns as that allows,
// and the rest go to members below their share. The extra partitions go to
// the members that own the most, so that as few as possible move.
//
// cooperative (KIP-429): a partition that another member owns is not
// assigned in the same rebalance; its owner sees it missing from its
// assignment, revokes it and rejoins, and the next rebalance assigns it.
// So a partition is never owned by two members at once, and members keep
// processing what they keep. Eager: every member revoked everything before
// joining, and each partition is assigned at once (its last owner's claim
// still makes it sticky).
//
// The result is a function of its inputs (members sorted by ID).
func assign(all, admitted []MemberInfo, n int, cooperative bool) map[string][]int {
	out := map[string][]int{}
	if len(admitted) == 0 || n <= 0 {
		return out
	}
	admitted = slices.Clone(admitted)
	slices.SortFunc(admitted, func(a, b MemberInfo) int { return cmp.Compare(a.ID, b.ID) })
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b MemberInfo) int { return cmp.Compare(a.ID, b.ID) })

	// Who owns what: the first claim in member order (a partition claimed
	// twice, after a member lost a generation unawares, goes to the first).
	owner := make([]string, n)
	for _, m := range all {
		for _, p := range m.Owned {
			if p >= 0 && p < n && owner[p] == "" {
				owner[p] = m.ID
			}
		}
	}
	owns := map[string][]int{}
	for p, id := range owner {
		if id != "" {
			owns[id] = append(owns[id], p)
		}
	}

	// Quotas: n/M each, one more for the n%M members that own the most.
	m := len(admitted)
	base, extra := n/m, n%m
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(len(owns[admitted[b].ID]), len(owns[admitted[a].ID]))
	})
	quota := make([]int, m)
	for rank, i := range order {
		quota[i] = base
		if rank < extra {
			quota[i]++
		}
	}

	// Keep owned partitions up to the quota.
	taken := make([]bool, n)
	for i, mem := range admitted {
		for _, p := range owns[mem.ID] {
			if len(out[mem.ID]) < quota[i] {
				out[mem.ID] = append(out[mem.ID], p)
				taken[p] = true
			}
		}
	}
	// Hand out the rest to members below their quota. Cooperative: only
	// partitions nobody owns; a partition its owner must give up waits for
	// the next rebalance.
	next := 0
	for i, mem := range admitted {
		for len(out[mem.ID]) < quota[i] {
			for next < n && (taken[next] || cooperative && owner[next] != "") {
				next++
			}
			if next == n {
				break
			}
			out[mem.ID] = append(out[mem.ID], next)
			taken[next] = true
			next++
		}
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out
}
