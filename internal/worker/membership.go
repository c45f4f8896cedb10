package worker

import (
	"context"
	"errors"
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

// errRevoked is the cause of a partition stop because the group moved it.
var errRevoked = errors.New("partition revoked")

// membership runs the worker's partitions as the group member assigns and
// revokes them.
type membership struct {
	w      *Worker
	ctx    context.Context // the partitions' parent
	runCtx context.Context // Run's: ended, a revoke is the shutdown's
	com    *committer

	mu    sync.Mutex
	parts map[int]*runningPartition
	gen   group.Generation
}

type runningPartition struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (ms *membership) Joined(gen group.Generation, assigned []int) {
	w := ms.w
	w.m.rebalances.Inc()
	ms.mu.Lock()
	ms.gen = gen
	ms.mu.Unlock()
	w.log.Info("joined generation", "generation", gen.ID, "member", gen.MemberID, "protocol", gen.Protocol, "partitions", assigned)
	w.mu.Lock()
	w.status.Generation = gen.ID
	w.status.MemberID = gen.MemberID
	w.status.Assigned = slices.Clone(assigned)
	w.mu.Unlock()
	if r, ok := w.deps.State.(Retainer); ok {
		r.Retain(w.cfg.Input, assigned)
	}
	ms.com.reviveAfterLoss()
	go w.checkAgreement(ms.runCtx, gen.MemberID)
}

func (ms *membership) Assigned(gen group.Generation, partitions []int) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, p := range partitions {
		if _, ok := ms.parts[p]; ok {
			continue
		}
		ctx, cancel := context.WithCancelCause(ms.ctx)
		rp := &runningPartition{cancel: cancel, done: make(chan struct{})}
		ms.parts[p] = rp
		go func() {
			defer close(rp.done)
			ms.w.runPartition(ctx, gen.ID, ms.com, p)
			ms.ended(p, rp)
		}()
	}
}

func (ms *membership) Revoked(gen group.Generation, partitions []int) {
	if ms.runCtx.Err() != nil {
		// The worker stops: the partitions get the shutdown's budget
		// for their final commit and checkpoint (finish).
		ms.w.stopping.Store(true)
	}
	ms.stop(partitions, errRevoked)
}

func (ms *membership) Lost(partitions []int, cause error) {
	ms.stop(partitions, errors.Join(errStaleGeneration, cause))
}

// stop ends the partitions' goroutines with cause and waits for them: a
// revoke commits and checkpoints (finish), a lost partition just stops.
func (ms *membership) stop(partitions []int, cause error) {
	ms.mu.Lock()
	var waiting []*runningPartition
	for _, p := range partitions {
		if rp, ok := ms.parts[p]; ok {
			rp.cancel(cause)
			waiting = append(waiting, rp)
			delete(ms.parts, p)
		}
	}
	ms.mu.Unlock()
	for _, rp := range waiting {
		<-rp.done
	}
	ms.com.forgetPartitions(partitions)
	ms.w.mu.Lock()
	ms.w.status.Assigned = slices.DeleteFunc(ms.w.status.Assigned, func(p int) bool { return slices.Contains(partitions, p) })
	ms.w.mu.Unlock()
}

// ended handles a partition whose goroutine ended by itself, not stopped
// by the membership (its checkpoint was fenced by another owner): the
// member gives it up and rejoins, so that the leader assigns it again
// (and a new session restores and claims it afresh).
func (ms *membership) ended(p int, rp *runningPartition) {
	ms.mu.Lock()
	mine := ms.parts[p] == rp
	if mine {
		delete(ms.parts, p)
	}
	ms.mu.Unlock()
	if !mine || ms.runCtx.Err() != nil {
		return
	}
	ms.com.forgetPartitions([]int{p})
	ms.w.member.Release([]int{p})
}

// fence stops every partition at once, without a final commit or
// checkpoint: the committer found that this member lost its generation
// (a commit rejected as stale, a pause past the session timeout). The
// member rejoins.
func (ms *membership) fence(cause error) {
	ms.mu.Lock()
	for _, rp := range ms.parts {
		rp.cancel(cause)
	}
	ms.mu.Unlock()
	ms.w.member.Forfeit()
}

// owned lists the partitions running now.
func (ms *membership) owned() []int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make([]int, 0, len(ms.parts))
	for p := range ms.parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// waitStopped waits until every partition goroutine has ended, at most
// timeout; it reports whether they did.
func (ms *membership) waitStopped(timeout time.Duration) bool {
	ms.mu.Lock()
	var waiting []*runningPartition
	for _, rp := range ms.parts {
		waiting = append(waiting, rp)
	}
	ms.mu.Unlock()
	deadline := time.After(timeout)
	for _, rp := range waiting {
		select {
		case <-rp.done:
		case <-deadline:
			return false
		}
	}
	return true
}

// memberCommitter commits through the group member (the committer's
// offsetCommitter).
type memberCommitter struct {
	m     *group.Member
	topic string
}

func (mc memberCommitter) CommitOffsets(offsets map[string]map[int]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return mc.m.Commit(ctx, offsets[mc.topic])
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
		Now:               w.deps.Now,
		OnState:           w.setJoined,
		OnJoinError: func(err error, everJoined bool) error {
			if e := w.check.Explain(err); e != nil && !everJoined {
				// A refused login or group ACL before the first
				// generation: the start-up rule, no retry.
				e.Attempts = 1
				return e
			}
			if !w.accessFailed(err) {
				w.joinErrors.note(w, err)
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the group member: %w", err)
	}
	return m, nil
}

// joinErrorLog rate-limits the WARN line about failed joins: the same
// error at most once per failureLogEvery.
type joinErrorLog struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

func (l *joinErrorLog) note(w *Worker, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := w.deps.Now()
	if err.Error() == l.last && now.Sub(l.at) < failureLogEvery {
		w.log.Debug("joining the consumer group failed again; retrying", "err", err)
		return
	}
	l.last, l.at = err.Error(), now
	w.log.Warn("joining the consumer group failed; retrying", "err", err)
}
