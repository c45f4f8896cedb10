package group

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// ErrRevoked is the cause of a partition's stop when the group moved it:
// its work ends with a final commit.
var ErrRevoked = errors.New("partition revoked")

// Partitions is a Handler that runs one goroutine per owned partition:
// started when assigned, stopped one by one when revoked (the goroutine's
// ctx ends with cause ErrRevoked) or lost (cause wrapping
// ErrStaleGeneration: no final commit), so that a cooperative rebalance
// pauses only what moves. It is the one lifecycle of the dedup stage's
// and the repartition hop's partitions.
type Partitions struct {
	// Work is a partition's work; it returns when ctx ends, or by itself
	// (then the member releases the partition and the leader assigns it
	// again).
	Work func(ctx context.Context, gen Generation, p int)
	// OnJoined, if set, runs when the member is in a new generation with
	// its assignment.
	OnJoined func(gen Generation, assigned []int)
	// OnRevoke, if set, runs before revoked partitions are stopped.
	OnRevoke func(partitions []int)
	// OnStopped, if set, runs after partitions stopped (revoked, lost, or
	// ended by themselves).
	OnStopped func(partitions []int)

	member *Member
	com    *Committer
	ctx    context.Context

	mu    sync.Mutex
	parts map[int]*runningPartition
}

type runningPartition struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// NewPartitions returns the partition lifecycle of member: partitions
// run under parent (which should outlive the member's Run, so that a
// shutdown stops them through a revoke), and com forgets what is given up.
func NewPartitions(parent context.Context, member *Member, com *Committer) *Partitions {
	return &Partitions{member: member, com: com, ctx: parent, parts: map[int]*runningPartition{}}
}

func (ps *Partitions) Joined(gen Generation, assigned []int) {
	if ps.com != nil {
		ps.com.ReviveAfterLoss()
	}
	if ps.OnJoined != nil {
		ps.OnJoined(gen, assigned)
	}
}

func (ps *Partitions) Assigned(gen Generation, partitions []int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range partitions {
		if _, ok := ps.parts[p]; ok {
			continue
		}
		ctx, cancel := context.WithCancelCause(ps.ctx)
		rp := &runningPartition{cancel: cancel, done: make(chan struct{})}
		ps.parts[p] = rp
		go func() {
			defer close(rp.done)
			ps.Work(ctx, gen, p)
			ps.ended(p, rp)
		}()
	}
}

func (ps *Partitions) Revoked(gen Generation, partitions []int) {
	if ps.OnRevoke != nil {
		ps.OnRevoke(partitions)
	}
	ps.stop(partitions, ErrRevoked)
}

func (ps *Partitions) Lost(partitions []int, cause error) {
	ps.stop(partitions, errors.Join(ErrStaleGeneration, cause))
}

// stop ends the partitions' goroutines with cause and waits for them.
func (ps *Partitions) stop(partitions []int, cause error) {
	ps.mu.Lock()
	var waiting []*runningPartition
	for _, p := range partitions {
		if rp, ok := ps.parts[p]; ok {
			rp.cancel(cause)
			waiting = append(waiting, rp)
			delete(ps.parts, p)
		}
	}
	ps.mu.Unlock()
	for _, rp := range waiting {
		<-rp.done
	}
	ps.stopped(partitions)
}

func (ps *Partitions) stopped(partitions []int) {
	if ps.com != nil {
		ps.com.ForgetPartitions(partitions)
	}
	if ps.OnStopped != nil {
		ps.OnStopped(partitions)
	}
}

// ended handles a partition whose work returned by itself, not stopped by
// the membership: the member gives it up and rejoins, so that the leader
// assigns it again (and its work starts afresh).
func (ps *Partitions) ended(p int, rp *runningPartition) {
	ps.mu.Lock()
	mine := ps.parts[p] == rp
	if mine {
		delete(ps.parts, p)
	}
	ps.mu.Unlock()
	if !mine || ps.ctx.Err() != nil {
		return
	}
	ps.stopped([]int{p})
	ps.member.Release([]int{p})
}

// Fence stops every partition at once, without a final commit: the
// committer found that the member lost its generation (a commit rejected
// as stale, a pause past the session timeout). The member gives them up
// as lost and rejoins.
func (ps *Partitions) Fence(cause error) {
	ps.mu.Lock()
	for _, rp := range ps.parts {
		rp.cancel(cause)
	}
	ps.mu.Unlock()
	ps.member.Forfeit()
}

// Owned lists the partitions running now.
func (ps *Partitions) Owned() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]int, 0, len(ps.parts))
	for p := range ps.parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
