package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keepalive makes the embedded broker's classic group coordinator keep a
// member alive while it waits for its JoinGroup or SyncGroup answer, as
// Apache Kafka does (MemberMetadata.shouldKeepAlive: "don't remove members as
// long as they have a request in purgatory"). kfake instead lets the member's
// session timer run from its last heartbeat; when it fires the member is
// removed and its pending JoinGroup or SyncGroup is never answered, so the
// client hangs until its own deadline (kafka-go: Timeout + RebalanceTimeout),
// then joins as a new member and restarts the rebalance for everyone. With
// kafka-go, which does not heartbeat between generations, that is what made
// groups livelock after abrupt failures (docs/worker.md, "Group liveness").
//
// kfake offers no option for it, so keepalive watches the group requests
// through a control function and, for each member with a JoinGroup or
// SyncGroup outstanding, sends the Heartbeat the member cannot send itself
// (a Heartbeat refreshes the session in PreparingRebalance and
// CompletingRebalance). It stops when the member's wait is over (its own
// Heartbeat, its LeaveGroup, the leader's SyncGroup, a Heartbeat answered
// with another generation or an unknown member, or, for a SyncGroup, with
// RebalanceInProgress) and after at most twice the member's rebalance
// timeout. A member that died while waiting is thus kept
// as long as Apache Kafka keeps it; once answered it expires after its
// session timeout as everywhere.
//
// It also starts the session timer of every member when a generation forms,
// as Apache Kafka's onCompleteJoin does. kfake starts a member's timer only
// when its JoinGroup answer is delivered; for a member killed while it
// waited, the delivery to the dead connection fails about half the time,
// and such a member never expires: it holds up every later rebalance until
// the rebalance timer drops it (20 s with the worker's defaults), or, when
// no other rebalance comes, keeps its partitions unconsumed for good. So on
// the first request of a new generation (a SyncGroup, Heartbeat or
// OffsetCommit naming it), keepalive lists the group's members and, if the
// group has not begun another rebalance meanwhile, sends each one Heartbeat
// of that generation: a dead member then expires after its session timeout,
// a live one has its session refreshed once.
type keepalive struct {
	cl      *kgo.Client
	ctx     context.Context
	mu      sync.Mutex
	gens    map[string]int32       // group → highest generation seen in a request
	primed  map[string]int32       // group → highest generation whose members' timers were started
	timeout map[string][2]int32    // group → session and rebalance timeout (ms) of its latest JoinGroup
	wait    map[memberKey]*waiting // members with an outstanding join or sync
	own     map[memberKey]int      // our heartbeats sent and not yet observed
	sends   sync.WaitGroup
	cancel  context.CancelFunc
	done    chan struct{}
}

type memberKey struct{ group, member string }

type waiting struct {
	sync     bool  // waiting for SyncGroup (else JoinGroup)
	gen      int32 // generation to heartbeat with
	every    time.Duration
	next     time.Time
	until    time.Time
	inFlight bool
}

// startKeepalive registers the control functions on c and starts the
// heartbeat loop; stop ends it.
func startKeepalive(c *kfake.Cluster, addr string) (*keepalive, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("bloomgate-broker-keepalive"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &keepalive{cl: cl, ctx: ctx, gens: map[string]int32{}, primed: map[string]int32{}, timeout: map[string][2]int32{},
		wait: map[memberKey]*waiting{}, own: map[memberKey]int{}, cancel: cancel, done: make(chan struct{})}
	for _, key := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit, kmsg.LeaveGroup} {
		c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			k.observe(req)
			return nil, nil, false
		})
	}
	go k.run(ctx)
	return k, nil
}

func (k *keepalive) stop() {
	k.cancel()
	<-k.done
	k.sends.Wait()
	k.cl.Close()
}

// observe runs on the cluster loop for every group request: it must not block.
func (k *keepalive) observe(req kmsg.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	seen := func(group string, gen int32) {
		if gen > k.gens[group] {
			k.gens[group] = gen
		}
		if gen > k.primed[group] {
			k.primed[group] = gen
			k.sends.Add(1)
			go func() { defer k.sends.Done(); k.prime(group, gen) }()
		}
	}
	// waiter keeps a member alive with the group's latest timeouts.
	waiter := func(group string, gen int32, sync bool) *waiting {
		to, ok := k.timeout[group]
		if !ok {
			return nil
		}
		session := time.Duration(to[0]) * time.Millisecond
		rebalance := time.Duration(max(to[1], to[0])) * time.Millisecond
		return &waiting{sync: sync, gen: gen, every: max(session/4, 50*time.Millisecond), next: now, until: now.Add(2 * rebalance)}
	}
	switch r := req.(type) {
	case *kmsg.JoinGroupRequest:
		k.timeout[r.Group] = [2]int32{r.SessionTimeoutMillis, r.RebalanceTimeoutMillis}
		if r.MemberID == "" {
			return // a new member has no session timer while it waits
		}
		k.wait[memberKey{r.Group, r.MemberID}] = waiter(r.Group, k.gens[r.Group], false)
	case *kmsg.SyncGroupRequest:
		seen(r.Group, r.Generation)
		key := memberKey{r.Group, r.MemberID}
		if len(r.GroupAssignment) > 0 {
			// The leader's assignment answers every member waiting in sync.
			delete(k.wait, key)
			for mk, w := range k.wait {
				if mk.group == r.Group && w.sync {
					delete(k.wait, mk)
				}
			}
			return
		}
		prev := k.wait[key]
		if prev == nil {
			// Joined without a member ID: its session timer runs from the
			// join's answer, so it needs keeping alive from now on.
			if w := waiter(r.Group, r.Generation, true); w != nil {
				k.wait[key] = w
			}
			return
		}
		prev.sync, prev.gen, prev.next = true, r.Generation, now
	case *kmsg.HeartbeatRequest:
		seen(r.Group, r.Generation)
		key := memberKey{r.Group, r.MemberID}
		if k.own[key] > 0 {
			k.own[key]--
			return
		}
		// The member heartbeats itself: it has its answer.
		delete(k.wait, key)
	case *kmsg.OffsetCommitRequest:
		seen(r.Group, r.Generation)
	case *kmsg.LeaveGroupRequest:
		delete(k.wait, memberKey{r.Group, r.MemberID})
		for _, m := range r.Members {
			delete(k.wait, memberKey{r.Group, m.MemberID})
		}
	}
}

func (k *keepalive) run(ctx context.Context) {
	defer close(k.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		k.mu.Lock()
		for mk := range k.own {
			if k.wait[mk] == nil {
				delete(k.own, mk)
			}
		}
		for mk, w := range k.wait {
			if now.After(w.until) {
				delete(k.wait, mk)
				continue
			}
			if w.inFlight || now.Before(w.next) {
				continue
			}
			w.inFlight, w.next = true, now.Add(w.every)
			k.own[mk]++
			sends.Add(1)
			go func(mk memberKey, w *waiting, gen int32) {
				defer sends.Done()
				err := k.heartbeat(ctx, mk, gen)
				k.mu.Lock()
				defer k.mu.Unlock()
				w.inFlight = false
				// Answered (a new generation), gone, or, for a sync, the
				// group went back to preparing a rebalance, which answers
				// every pending SyncGroup: nothing to keep. A dead member
				// kept alive then would hold up the rebalance.
				if errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
					(w.sync && errors.Is(err, kerr.RebalanceInProgress)) {
					if k.wait[mk] == w {
						delete(k.wait, mk)
					}
				}
			}(mk, w, w.gen)
		}
		k.mu.Unlock()
	}
}

// prime starts the session timer of every member of group's generation gen
// (see keepalive).
func (k *keepalive) prime(group string, gen int32) {
	ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil || len(resp.Groups) != 1 {
		return
	}
	// Only while the generation stands: once the group prepares the next
	// rebalance, a member waiting in its first JoinGroup is listed too, and
	// a heartbeat would start its session timer while nobody keeps it
	// alive (kfake would drop it unanswered); the next generation primes.
	if st := resp.Groups[0].State; st != "CompletingRebalance" && st != "Stable" {
		return
	}
	for _, m := range resp.Groups[0].Members {
		mk := memberKey{group, m.MemberID}
		k.mu.Lock()
		k.own[mk]++ // not the member's own heartbeat
		k.mu.Unlock()
		_ = k.heartbeat(ctx, mk, gen)
	}
}

func (k *keepalive) heartbeat(ctx context.Context, mk memberKey, gen int32) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = mk.group, mk.member, gen
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}
