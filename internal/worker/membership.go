package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/internal/group"
)

// The worker's side of the consumer group (internal/group): one member,
// one committer, and a goroutine per owned partition. The member tells
// what the partitions become (membership, a group.Handler); partitions
// start when assigned and stop one by one when revoked, so that a
// cooperative rebalance pauses only the partitions that move
// (docs/worker.md, "Group membership").

// Causes of a partition stop that mean the member lost it (no final
// commit or checkpoint): the committer's, kept under the worker's names.
var (
	errStaleGeneration = group.ErrStaleGeneration
	errPaused          = group.ErrPaused
)

// membership is the worker's use of group.Partitions: what it does when
// the member joins a generation and when partitions stop.
type membership struct {
	*group.Partitions
	w      *Worker
	runCtx context.Context // Run's: ended, a revoke is the shutdown's
	// checks are the agreement checks started on joins (checkAgreement);
	// Run waits for them.
	checks sync.WaitGroup
}

func newMembership(w *Worker, runCtx, partsCtx context.Context, member *group.Member, com *group.Committer) *membership {
	ms := &membership{Partitions: group.NewPartitions(partsCtx, member, com), w: w, runCtx: runCtx}
	ms.Work = func(ctx context.Context, gen group.Generation, p int) { w.runPartition(ctx, gen.ID, com, p) }
	ms.OnJoined = ms.joined
	ms.OnRevoke = func([]int) {
		if runCtx.Err() != nil {
			// The worker stops: the partitions get the shutdown's budget
			// for their final commit and checkpoint (finish).
			w.stopping.Store(true)
		}
	}
	ms.OnStopped = func(partitions []int) {
		w.mu.Lock()
		w.status.Assigned = slices.DeleteFunc(w.status.Assigned, func(p int) bool { return slices.Contains(partitions, p) })
		w.mu.Unlock()
		for _, p := range partitions {
			w.m.forgetPartition(w.cfg.Input, p)
		}
	}
	return ms
}

func (ms *membership) joined(gen group.Generation, assigned []int) {
	w := ms.w
	w.m.rebalances.Inc()
	w.log.Info("joined generation", "generation", gen.ID, "member", gen.MemberID, "protocol", gen.Protocol, "partitions", assigned)
	w.mu.Lock()
	w.status.Generation = gen.ID
	w.status.MemberID = gen.MemberID
	for _, p := range assigned {
		if !slices.Contains(w.status.Assigned, p) {
			w.assignedAt, w.assignedTotals = w.deps.Now(), w.totals()
			break
		}
	}
	w.status.Assigned = slices.Clone(assigned)
	w.mu.Unlock()
	if r, ok := w.deps.State.(Retainer); ok {
		r.Retain(w.cfg.Input, assigned)
	}
	ms.checks.Go(func() { w.checkAgreement(ms.runCtx, gen) })
}

// newMember builds the worker's group member.
func (w *Worker) newMember() (*group.Member, error) {
	m, err := group.New(group.Config{
		Brokers:           w.cfg.Brokers,
		Transport:         w.cfg.Transport,
		Group:             w.cfg.Group,
		Topic:             w.cfg.Input,
		InstanceID:        w.cfg.InstanceID,
		ClientID:          "bloomgate",
		SessionTimeout:    w.cfg.sessionTimeout(),
		RebalanceTimeout:  w.cfg.RebalanceTimeout,
		HeartbeatInterval: w.cfg.HeartbeatInterval,
		RetryBackoff:      200 * time.Millisecond,
		UserData:          encodeSettings(w.agreedSettings()),
		Admit:             w.admit,
		Eager:             w.cfg.EagerRebalancing,
		Logger:            w.deps.Logger.With("input", w.cfg.Input),
		OnState:           w.setJoined,
		OnRefused:         func(string) { w.m.assignmentsRefused.Inc() },
		OnJoinError: func(err error, everJoined bool) error {
			if e := w.check.Explain(err); e != nil && !everJoined {
				// A refused login or group ACL before the first
				// generation: the start-up rule, no retry.
				e.Attempts = 1
				return e
			}
			if !w.accessFailed(err) {
				w.joinLog.Failed(err)
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the group member: %w", err)
	}
	return m, nil
}
