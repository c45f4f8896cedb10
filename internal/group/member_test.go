package group

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// recorder is a Handler that keeps what each member owns and every event,
// and checks that no partition is ever owned by two members at once.
type recorder struct {
	t      *testing.T
	mu     sync.Mutex
	owners map[int]string
	events []string
	owned  map[string][]int
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, owners: map[int]string{}, owned: map[string][]int{}}
}

type handler struct {
	r    *recorder
	name string
}

func (h handler) Assigned(gen Generation, ps []int) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for _, p := range ps {
		if o, ok := h.r.owners[p]; ok && o != h.name {
			h.r.t.Errorf("partition %d assigned to %s while %s owns it", p, h.name, o)
		}
		h.r.owners[p] = h.name
	}
	h.r.owned[h.name] = union(h.r.owned[h.name], ps)
	h.r.events = append(h.r.events, fmt.Sprintf("%s assigned %v", h.name, ps))
}

func (h handler) release(what string, ps []int) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for _, p := range ps {
		if h.r.owners[p] == h.name {
			delete(h.r.owners, p)
		}
	}
	h.r.owned[h.name] = diff(h.r.owned[h.name], ps)
	h.r.events = append(h.r.events, fmt.Sprintf("%s %s %v", h.name, what, ps))
}

func (h handler) Joined(Generation, []int)         {}
func (h handler) Revoked(gen Generation, ps []int) { h.release("revoked", ps) }
func (h handler) Lost(ps []int, _ error)           { h.release("lost", ps) }
func (r *recorder) ownedBy(name string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.owned[name])
}
func (r *recorder) count(prefix string) (n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if len(e) >= len(prefix) && e[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

type running struct {
	m      *Member
	cancel context.CancelFunc
	done   chan error
}

func startMember(t *testing.T, brokers []string, r *recorder, name, instance string, tweaks ...func(*Config)) *running {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("BLOOMGATE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("member", name)
	}
	cfg := Config{Brokers: brokers, Group: "g", Topic: "t", InstanceID: instance, Logger: log}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rm := &running{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { rm.done <- m.Run(ctx, handler{r, name}) }()
	t.Cleanup(func() { rm.stop(t) })
	return rm
}

func (rm *running) stop(t *testing.T) {
	rm.cancel()
	select {
	case err, ok := <-rm.done:
		if ok {
			close(rm.done)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("member did not stop")
	}
}

// heartbeatCounter counts the heartbeats the coordinator answered.
type heartbeatCounter struct {
	kafka.RoundTripper
	n atomic.Int64
}

func (h *heartbeatCounter) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	res, err := h.RoundTripper.RoundTrip(ctx, addr, req)
	if err == nil && req.ApiKey() == protocol.Heartbeat {
		h.n.Add(1)
	}
	return res, err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	kafkatest.WaitFor(t, 60*time.Second, what, cond)
}

// TestCooperativeJoin: a third member joins two that share six
// partitions; each of the two gives up only what moves (one partition
// each), nothing is owned twice, and the newcomer ends with two.
func TestCooperativeJoin(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 6, "t")
	r := newRecorder(t)
	startMember(t, brokers, r, "a", "")
	startMember(t, brokers, r, "b", "")
	waitFor(t, "a and b share the partitions", func() bool { return len(r.ownedBy("a")) == 3 && len(r.ownedBy("b")) == 3 })
	before := map[string][]int{"a": r.ownedBy("a"), "b": r.ownedBy("b")}
	revokedBefore := r.count("a revoked") + r.count("b revoked")
	startMember(t, brokers, r, "c", "")
	waitFor(t, "c got its share", func() bool {
		return len(r.ownedBy("a")) == 2 && len(r.ownedBy("b")) == 2 && len(r.ownedBy("c")) == 2
	})
	for name, was := range before {
		now := r.ownedBy(name)
		if len(diff(now, was)) != 0 || len(diff(was, now)) != 1 {
			t.Errorf("%s owned %v and now %v: want it to keep all but one", name, was, now)
		}
	}
	if n := r.count("a revoked") + r.count("b revoked") - revokedBefore; n != 2 {
		t.Errorf("%d revocations of a and b, want one each", n)
	}
}

// TestDynamicMemberLeaves: a member that stops gives up its partitions
// (LeaveGroup), and the other takes them without giving up its own.
func TestDynamicMemberLeaves(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 4, "t")
	r := newRecorder(t)
	startMember(t, brokers, r, "a", "")
	b := startMember(t, brokers, r, "b", "")
	waitFor(t, "shared", func() bool { return len(r.ownedBy("a")) == 2 && len(r.ownedBy("b")) == 2 })
	revoked := r.count("a revoked") // a may have given b its share when b joined
	start := time.Now()
	b.stop(t)
	waitFor(t, "a took everything", func() bool { return len(r.ownedBy("a")) == 4 })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a took b's partitions after %v (LeaveGroup should make it immediate)", d)
	}
	if n := r.count("a revoked") - revoked; n != 0 {
		t.Errorf("a revoked partitions %d times while b left", n)
	}
}

// TestStaticMemberRestart: a static member restarted within the session
// timeout gets the same partitions back, and the other member gives up
// nothing and gets nothing (no rebalance).
func TestStaticMemberRestart(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 4, "t")
	r := newRecorder(t)
	beats := &heartbeatCounter{RoundTripper: kafka.DefaultTransport}
	a := startMember(t, brokers, r, "a", "pod-a", func(c *Config) { c.Transport = beats })
	b := startMember(t, brokers, r, "b", "pod-b")
	waitFor(t, "shared", func() bool { return len(r.ownedBy("a")) == 2 && len(r.ownedBy("b")) == 2 })
	had := r.ownedBy("b")
	aEvents := r.count("a ")
	aGen, _, _ := a.m.State()
	b.stop(t)
	start := time.Now()
	startMember(t, brokers, r, "b", "pod-b")
	waitFor(t, "b back", func() bool { return len(r.ownedBy("b")) == 2 })
	// The goal is 2 s (docs/worker.md, "Group membership"); the bound
	// leaves room for a loaded machine, the figure is logged.
	d := time.Since(start)
	t.Logf("the restarted static member got its partitions back %v after its start", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("the restarted static member processed again after %v", d)
	}
	if got := r.ownedBy("b"); !slices.Equal(got, had) {
		t.Errorf("b had %v and got %v back", had, got)
	}
	// A rebalance would reach a through its heartbeats: two answered
	// after b is back, the second sent after the first's answer.
	n := beats.n.Load()
	waitFor(t, "two heartbeats of a after b is back", func() bool { return beats.n.Load() >= n+2 })
	if gen, joined, _ := a.m.State(); gen.ID != aGen.ID || !joined {
		t.Errorf("a is in generation %d (joined %v), was in %d: b's restart rebalanced the group", gen.ID, joined, aGen.ID)
	}
	if n := r.count("a "); n != aEvents {
		t.Errorf("a saw %d events during b's restart, want none", n-aEvents)
	}
}

// TestCommitAndFetch: offsets committed in a generation are fetched back.
func TestCommitAndFetch(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 2, "t")
	r := newRecorder(t)
	a := startMember(t, brokers, r, "a", "")
	waitFor(t, "assigned", func() bool { return len(r.ownedBy("a")) == 2 })
	ctx := t.Context()
	if err := a.m.Commit(ctx, map[int]int64{0: 17, 1: 42}); err != nil {
		t.Fatal(err)
	}
	got, err := a.m.FetchOffsets(ctx, []int{0, 1})
	if err != nil || got[0] != 17 || got[1] != 42 {
		t.Errorf("fetched %v, %v", got, err)
	}
}

// TestJoinBackoff: failed joins are retried after the first wait, doubled
// up to a second (Java clients' retry.backoff.max.ms), or after the first
// wait throughout when it is longer.
func TestJoinBackoff(t *testing.T) {
	for _, tc := range []struct {
		first time.Duration
		want  []time.Duration
	}{
		{200 * time.Millisecond, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}},
		{time.Second, []time.Duration{time.Second, time.Second, time.Second}},
		{3 * time.Second, []time.Duration{3 * time.Second, 3 * time.Second}},
	} {
		b := joinBackoff(tc.first)
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		for i, w := range tc.want {
			if got := b.Delay(); got != w {
				t.Errorf("first %v: wait %d is %v, want %v", tc.first, i+1, got, w)
			}
			b.Wait(canceled, 0) // doubles the delay; returns at once
		}
	}
}

// TestTimings: zero group timings take the defaults; the heartbeat
// interval's is at most a third of the session timeout, and the rebalance
// timeout's lies RebalanceOverSession above it.
func TestTimings(t *testing.T) {
	for _, c := range []struct{ in, want [3]time.Duration }{
		{[3]time.Duration{}, [3]time.Duration{DefaultSessionTimeout, DefaultSessionTimeout + RebalanceOverSession, DefaultHeartbeatInterval}},
		{[3]time.Duration{30 * time.Second}, [3]time.Duration{30 * time.Second, 40 * time.Second, time.Second}},
		{[3]time.Duration{time.Second}, [3]time.Duration{time.Second, 11 * time.Second, time.Second / 3}},
		{[3]time.Duration{6 * time.Second, 7 * time.Second, 2 * time.Second}, [3]time.Duration{6 * time.Second, 7 * time.Second, 2 * time.Second}},
	} {
		s, r, h := Timings(c.in[0], c.in[1], c.in[2])
		if got := [3]time.Duration{s, r, h}; got != c.want {
			t.Errorf("Timings(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
