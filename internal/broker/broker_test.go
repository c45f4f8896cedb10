package broker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestParseTopicSpec(t *testing.T) {
	for in, want := range map[string]TopicSpec{
		"orders:8": {"orders", 8}, "orders": {"orders", 1}, " a : 3 ": {"a", 3},
	} {
		got, err := ParseTopicSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseTopicSpec(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ":3", "a:x", "a:0", "a:-1"} {
		if _, err := ParseTopicSpec(in); err == nil {
			t.Errorf("ParseTopicSpec(%q) accepted", in)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Listen: "nonsense"},
		{Topics: []TopicSpec{{"a", 1}, {"a", 2}}},
		{Topics: []TopicSpec{{"a", 0}}},
		{Users: []User{{Mechanism: "GSSAPI", Username: "u"}}},
		{ACLs: true},
	}
	for _, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func start(t *testing.T, cfg Config) (*Broker, context.CancelFunc, chan error) {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return b, cancel, done
}

func produce(t *testing.T, addr, topic string, n, from int) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 1000}
	defer w.Close()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", from+i), Value: fmt.Appendf(nil, "v%d", from+i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// consumeGroup reads n records with a consumer group and commits them.
func consumeGroup(t *testing.T, addr, topic, group string, n int) map[string]bool {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{addr}, Topic: topic, GroupID: group,
		SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: time.Second,
		StartOffset: kafka.FirstOffset, MaxWait: 50 * time.Millisecond, CommitInterval: 0,
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]bool{}
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetching after %d of %d: %v", len(got), n, err)
		}
		got[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("committing: %v", err)
		}
	}
	return got
}

func TestKafkaGoRoundTripAndGroup(t *testing.T) {
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"in", 4}}})
	if !strings.HasPrefix(b.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q", b.Addr())
	}
	conn, err := kafka.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions("in")
	conn.Close()
	if err != nil || len(parts) != 4 {
		t.Fatalf("partitions of in: %d, %v", len(parts), err)
	}
	produce(t, b.Addr(), "in", 200, 0)
	start := time.Now()
	got := consumeGroup(t, b.Addr(), "in", "g1", 200)
	if len(got) != 200 {
		t.Fatalf("consumed %d distinct, want 200", len(got))
	}
	t.Logf("group join + consume 200 records: %v", time.Since(start))
}

func TestCreateTopics(t *testing.T) {
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"a", 2}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.CreateTopics(ctx, TopicSpec{"a", 5}, TopicSpec{"b", 3}); err != nil {
		t.Fatal(err)
	}
	conn, err := kafka.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, want := range map[string]int{"a": 2, "b": 3} {
		if parts, err := conn.ReadPartitions(name); err != nil || len(parts) != want {
			t.Errorf("topic %s: %d partitions, %v; want %d", name, len(parts), err, want)
		}
	}
	if err := b.CreateTopics(ctx, TopicSpec{"", 1}); err == nil {
		t.Error("empty topic name accepted")
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := kafka.DialContext(context.Background(), "tcp", b.Addr()); err == nil {
		t.Fatal("broker still accepts connections after Run returned")
	}
	b.Close() // idempotent
}

func TestDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	// The groups' hold after the restart (TestGroupRestoreHold) at the
	// readers' session timeout.
	cfg := Config{Listen: "127.0.0.1:0", DataDir: dir, Topics: []TopicSpec{{"in", 2}}, GroupRestoreHold: time.Second}
	b1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	produce(t, b1.Addr(), "in", 50, 0)
	consumeGroup(t, b1.Addr(), "in", "g", 50) // commits offsets 50
	b1.Close()

	cfg.Listen = b1.Addr() // same address, as a restarted broker would have
	cfg.Topics = append(cfg.Topics, TopicSpec{"added-after-restart", 3})
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	conn, err := kafka.Dial("tcp", b2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if parts, err := conn.ReadPartitions("added-after-restart"); err != nil || len(parts) != 3 {
		t.Fatalf("topic created after restart: %d partitions, %v", len(parts), err)
	}
	produce(t, b2.Addr(), "in", 10, 50)
	// The group resumes from its committed offsets: it sees only the 10 new records.
	got := consumeGroup(t, b2.Addr(), "in", "g", 10)
	for v := range got {
		var i int
		fmt.Sscanf(v, "v%d", &i)
		if i < 50 {
			t.Fatalf("record %q consumed again: committed offsets were lost", v)
		}
	}
	// A fresh group still reads all 60 records: the data survived.
	if got := consumeGroup(t, b2.Addr(), "in", "fresh", 60); len(got) != 60 {
		t.Fatalf("fresh group read %d records, want 60", len(got))
	}
}

// TestGroupRestoreHold: after a restart that restored groups, JoinGroup
// is answered COORDINATOR_LOAD_IN_PROGRESS until the hold has passed, so
// that no member forms a generation while the members from before the
// restart still process their partitions; a broker without restored
// groups does not hold.
func TestGroupRestoreHold(t *testing.T) {
	// One JoinGroup, answered as is (no retries: kgo would retry
	// COORDINATOR_LOAD_IN_PROGRESS itself).
	join := func(addr, member string) int16 { return joinGroup(t, addr, "g", member) }
	const hold = 2 * time.Second
	dir := t.TempDir()
	cfg := Config{Listen: "127.0.0.1:0", DataDir: dir, Topics: []TopicSpec{{"in", 2}}, GroupRestoreHold: hold}
	b1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if code := join(b1.Addr(), ""); code == kerr.CoordinatorLoadInProgress.Code {
		t.Fatal("a broker without restored groups holds joins")
	}
	produce(t, b1.Addr(), "in", 5, 0)
	consumeGroup(t, b1.Addr(), "in", "g", 5)
	b1.Close()

	cfg.Listen = b1.Addr()
	start := time.Now()
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if code := join(b2.Addr(), ""); code != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join right after the restart: error code %d, want %d (COORDINATOR_LOAD_IN_PROGRESS)", code, kerr.CoordinatorLoadInProgress.Code)
	}
	// A group that was not there before the restart has nobody to wait for.
	if code := joinGroup(t, b2.Addr(), "brand-new", ""); code == kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join of a new group right after the restart: COORDINATOR_LOAD_IN_PROGRESS")
	}
	// A member from before the restart, rejoining with its ID, is told at
	// once that it is unknown, which stops its partitions (holding it too
	// would let it process them until a new member formed a generation).
	if code := join(b2.Addr(), "member-from-before"); code != kerr.UnknownMemberID.Code {
		t.Fatalf("rejoin of a member from before the restart: error code %d, want %d (UNKNOWN_MEMBER_ID)", code, kerr.UnknownMemberID.Code)
	}
	time.Sleep(time.Until(start.Add(hold + 100*time.Millisecond)))
	if code := join(b2.Addr(), ""); code == kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join after the hold: still COORDINATOR_LOAD_IN_PROGRESS")
	}
	// The group's committed offsets survived: a reader resumes after them.
	produce(t, b2.Addr(), "in", 3, 5)
	if got := consumeGroup(t, b2.Addr(), "in", "g", 3); len(got) != 3 {
		t.Fatalf("after the hold the group read %d records, want 3", len(got))
	}
}

// joinGroup sends one JoinGroup for group, answered as is (no retries: kgo
// would retry COORDINATOR_LOAD_IN_PROGRESS itself), and returns its error
// code.
func joinGroup(t *testing.T, addr, group, member string) int16 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType, req.MemberID = group, "consumer", member
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 10000
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "range"
	req.Protocols = append(req.Protocols, proto)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ErrorCode
}

func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("BLOOMGATE_REQUIRE_TOOLS") == "1" {
			t.Fatal("kcat not found and BLOOMGATE_REQUIRE_TOOLS=1")
		}
		t.Skip("kcat not installed (apt-get install kcat); set BLOOMGATE_REQUIRE_TOOLS=1 to require it")
	}
	return p
}

func TestKcat(t *testing.T) {
	kcat := kcatPath(t)
	b, _, _ := start(t, Config{Topics: []TopicSpec{{"t", 3}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var in bytes.Buffer
	for i := range 30 {
		fmt.Fprintf(&in, "key%d:value%d\n", i, i)
	}
	prod := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-t", "t", "-P", "-K:")
	prod.Stdin = &in
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	cons := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-t", "t", "-C", "-e", "-q", "-f", "%k=%s\n")
	out, err := cons.Output()
	if err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 30 {
		t.Fatalf("kcat read %d records, want 30:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for i := range 30 {
		if !seen[fmt.Sprintf("key%d=value%d", i, i)] {
			t.Fatalf("record key%d missing from kcat output", i)
		}
	}
	// kafka-go reads what librdkafka wrote.
	if got := consumeGroup(t, b.Addr(), "t", "g", 30); len(got) != 30 {
		t.Fatalf("kafka-go read %d of kcat's records", len(got))
	}
}
