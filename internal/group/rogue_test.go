package group

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
	"github.com/segmentio/kafka-go/protocol/joingroup"
	"github.com/segmentio/kafka-go/protocol/syncgroup"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// rogue is a group member that speaks the protocol with raw requests, as
// any client with the group's READ ACL can: it says what it likes in its
// subscription and, when it leads, assigns what it likes.
type rogue struct {
	brokers  []string
	protocol string
	meta     []byte
	// assign, when the rogue leads, returns each member's assignment.
	assign func(members []joingroup.ResponseMember) []syncgroup.RequestAssignment

	// rec, if set, is told what the rogue runs (it gives everything up
	// before it joins again, as an eager client does).
	rec *recorder

	mu       sync.Mutex
	assigned []int
	leads    atomic.Bool
}

func (r *rogue) run(ctx context.Context) {
	tr := &kafka.Transport{}
	addr := kafka.TCP(r.brokers...)
	rt := func(req protocol.Message) (protocol.Message, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return tr.RoundTrip(ctx, addr, req)
	}
	memberID := ""
	for ctx.Err() == nil {
		res, err := rt(&joingroup.Request{GroupID: "g", SessionTimeoutMS: 10000, RebalanceTimeoutMS: 20000, MemberID: memberID,
			ProtocolType: "consumer", Protocols: []joingroup.RequestProtocol{{Name: r.protocol, Metadata: r.meta}}})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		jr := res.(*joingroup.Response)
		memberID = jr.MemberID
		if jr.ErrorCode != 0 {
			continue
		}
		var as []syncgroup.RequestAssignment
		r.leads.Store(jr.LeaderID == jr.MemberID)
		if jr.LeaderID == jr.MemberID {
			as = r.assign(jr.Members)
		}
		res, err = rt(&syncgroup.Request{GroupID: "g", GenerationID: jr.GenerationID, MemberID: memberID,
			ProtocolType: "consumer", ProtocolName: jr.ProtocolName, Assignments: as})
		if err != nil || res.(*syncgroup.Response).ErrorCode != 0 {
			continue
		}
		tps, _ := decodeAssignment(res.(*syncgroup.Response).Assignments)
		r.mu.Lock()
		r.assigned = partitionsOf(tps, "t")
		r.mu.Unlock()
		if r.rec != nil {
			handler{r.rec, "rogue"}.Assigned(Generation{}, r.holds())
		}
		for ctx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			res, err := rt(&coordinatedHeartbeat{GroupID: "g", GenerationID: jr.GenerationID, MemberID: memberID})
			if err == nil && heartbeatError(res.(*heartbeat.Response)) != 0 {
				break // a rebalance: join again (an eager client: it gives up everything)
			}
		}
		if r.rec != nil {
			handler{r.rec, "rogue"}.Revoked(Generation{}, r.holds())
		}
	}
}

func (r *rogue) holds() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.assigned)
}

func startRogue(t *testing.T, r *rogue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// logged collects a member's log lines at WARN and above.
type logged struct {
	mu    sync.Mutex
	lines []string
}

func (l *logged) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }
func (l *logged) find(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(x string) bool { return strings.Contains(x, s) })
}

// TestRogueLeaderAssignment: a leader that hands this member partitions
// the topic does not have (negative, out of range, twenty thousand of
// them), some twice and some of another topic: only the valid ones run,
// each once; the refusal is an ERROR naming the leader, counted, and the
// member rejoins (and is refused again: the leader keeps lying).
func TestRogueLeaderAssignment(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 4, "t")
	lie := []int32{-5, -1, 0, 0, 3, 99, 1000000}
	for p := int32(4); p < 20000; p++ {
		lie = append(lie, p)
	}
	bad := &rogue{brokers: brokers, protocol: ProtocolEager, meta: encodeSubscription(subscription{Topics: []string{"t"}, Generation: noGeneration}),
		assign: func(ms []joingroup.ResponseMember) []syncgroup.RequestAssignment {
			var out []syncgroup.RequestAssignment
			for _, m := range ms {
				tps := []topicPartitions{{Topic: "x", Partitions: []int32{0}}, {Topic: "t", Partitions: lie}}
				b := appendTopicPartitions([]byte{0, 1}, tps)
				b = append(b, 0xff, 0xff, 0xff, 0xff) // no user data
				out = append(out, syncgroup.RequestAssignment{MemberID: m.MemberID, Assignment: b})
			}
			return out
		}}
	startRogue(t, bad)
	waitFor(t, "the rogue leads", bad.leads.Load)

	rec := newRecorder(t)
	var refused atomic.Int32
	logs := &logged{}
	m, err := New(Config{Brokers: brokers, Group: "g", Topic: "t", Logger: slog.New(logs), OnRefused: func(string) { refused.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, handler{rec, "a"}) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the member runs the valid partitions", func() bool { return slices.Equal(rec.ownedBy("a"), []int{0, 3}) })
	waitFor(t, "the refusal is logged", func() bool { return logs.find("ERROR") && logs.find("assigned this member") })
	waitFor(t, "it rejoins and is refused again", func() bool { return refused.Load() >= 2 })
	if got := rec.ownedBy("a"); !slices.Equal(got, []int{0, 3}) {
		t.Errorf("owns %v", got)
	}
}

// TestLyingClaimsAgainstMember: a member that claims to own every
// partition (cooperative, with a member id that sorts first) joins a
// member that holds them all and leads: within a rebalance or two every
// partition runs somewhere, none in two places.
func TestLyingClaimsAgainstMember(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 4, "t")
	rec := newRecorder(t)
	startMember(t, brokers, rec, "a", "")
	waitFor(t, "a owns everything", func() bool { return len(rec.ownedBy("a")) == 4 })
	liar := &rogue{brokers: brokers, protocol: ProtocolCooperative,
		meta: encodeSubscription(subscription{Topics: []string{"t"}, Owned: []topicPartitions{{Topic: "t", Partitions: []int32{0, 1, 2, 3}}},
			Generation: noGeneration}),
		assign: func([]joingroup.ResponseMember) []syncgroup.RequestAssignment { return nil }}
	startRogue(t, liar)
	waitFor(t, "every partition runs, the liar's and a's", func() bool {
		got := union(rec.ownedBy("a"), liar.holds())
		return len(got) == 4 && len(liar.holds()) == 2
	})
	if overlap := slices.DeleteFunc(rec.ownedBy("a"), func(p int) bool { return !slices.Contains(liar.holds(), p) }); len(overlap) > 0 {
		t.Errorf("partitions %v run by both", overlap)
	}
}

// TestEagerJoinerTurnsGroupEager: two members share six partitions
// cooperatively; an eager-only client (kcat's default) joins, so the group
// turns eager. Both members give up their partitions before the new
// assignment is handed out, and no partition is ever run by two members
// (before, members kept what the leader had moved to the newcomer until
// the next generation).
func TestEagerJoinerTurnsGroupEager(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t, 6, "t")
	rec := newRecorder(t)
	startMember(t, brokers, rec, "a", "")
	startMember(t, brokers, rec, "b", "")
	waitFor(t, "a and b share the partitions", func() bool { return len(rec.ownedBy("a")) == 3 && len(rec.ownedBy("b")) == 3 })
	eager := &rogue{brokers: brokers, protocol: ProtocolEager, rec: rec,
		meta:   encodeSubscription(subscription{Topics: []string{"t"}, Generation: noGeneration}),
		assign: func([]joingroup.ResponseMember) []syncgroup.RequestAssignment { return nil }}
	startRogue(t, eager)
	waitFor(t, "the three share the partitions", func() bool {
		return len(rec.ownedBy("a")) == 2 && len(rec.ownedBy("b")) == 2 && len(eager.holds()) == 2
	})
	// The recorder failed the test if a partition was assigned to one
	// while another owned it.
}
