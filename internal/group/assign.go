package group

import (
	"cmp"
	"slices"
)

// MemberInfo is one member of a rebalance as the leader sees it.
type MemberInfo struct {
	ID         string
	InstanceID string // "" for a dynamic member
	// UserData is what the member announced (Config.UserData).
	UserData []byte
	// Owned are the partitions of the topic the member had in its last
	// generation, sorted.
	Owned []int
}

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
