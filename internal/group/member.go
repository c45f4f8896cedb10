package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/describegroups"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
	"github.com/segmentio/kafka-go/protocol/joingroup"
	"github.com/segmentio/kafka-go/protocol/leavegroup"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
	"github.com/segmentio/kafka-go/protocol/offsetfetch"
	"github.com/segmentio/kafka-go/protocol/syncgroup"

	"github.com/bloomgate/bloomgate/internal/backoff"
)

// Protocol names offered in JoinGroup, preferred first. A group whose
// members all offer cooperative-sticky rebalances cooperatively; a member
// that offers only range (an older build, kafka-go's ConsumerGroup) makes
// the coordinator choose range, and every member then rebalances eagerly,
// which is how a rolling upgrade moves from one to the other.
const (
	ProtocolCooperative = "cooperative-sticky"
	ProtocolEager       = "range"
)

// Generation is one generation of the group as this member joined it.
type Generation struct {
	ID       int32
	MemberID string
	Protocol string
	Leader   bool
}

// Cooperative reports whether the generation rebalances cooperatively.
func (g Generation) Cooperative() bool { return g.Protocol == ProtocolCooperative }

// Handler is told what the member's partitions become. Its methods are
// called from Run's goroutine, one at a time; heartbeats go on meanwhile,
// so a Revoked that takes a while (a final commit and checkpoint) does not
// cost the membership.
type Handler interface {
	// Joined: the member is in generation gen, whose assignment gives it
	// assigned (what it keeps and what it gets); called before Revoked
	// and Assigned tell what changes.
	Joined(gen Generation, assigned []int)
	// Assigned: the partitions are this member's from generation gen on.
	Assigned(gen Generation, partitions []int)
	// Revoked: the partitions are to be given up: finish with them (a
	// final commit) and return once they are released. In a cooperative
	// generation the member keeps the others.
	Revoked(gen Generation, partitions []int)
	// Lost: the partitions are no longer this member's and may be another
	// member's already (the session expired, the generation was fenced):
	// stop them without committing.
	Lost(partitions []int, cause error)
}

// Errors.
var (
	// ErrRebalancing: a commit during a rebalance; retry once the member
	// is in a generation again (its partitions are still its own in a
	// cooperative generation).
	ErrRebalancing = errors.New("group is rebalancing")
	// ErrNotMember: the member is not in a generation (it lost its
	// membership, or has not joined yet): its partitions are not its own.
	ErrNotMember = errors.New("not a member of the group's current generation")
)

// Member is one member of a consumer group, on kafka-go's protocol layer
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch
// through the Transport). New starts nothing; Run joins and keeps the
// membership.
type Member struct {
	cfg  Config
	log  *slog.Logger
	addr net.Addr

	mu       sync.Mutex
	memberID string
	gen      Generation
	joined   bool      // in a generation (synced, heartbeats accepted)
	since    time.Time // when the member last left a generation (zero while in one)
	owned    []int     // sorted
	// prev is what an eager member gave up before rejoining: announced
	// in its subscription so that the leader can give it back (nobody
	// else owns it).
	prev    []int
	prevGen int32 // the generation prev was assigned in
	fresh   bool  // rejoin as a new member (drop the member ID)
	forfeit bool  // rejoin with the partitions lost (Forfeit)

	partitionsSeen int // the topic's partition count, as last read

	// Run's goroutine only:
	plans    []*plan // the assignments this member handed out as the leader of its last generations (consecutive, oldest first)
	proposed *plan   // the assignment of the generation being synced, if this member leads it
	// recheck: rejoin this long after the generation is stable (0: no
	// need): the leader left partitions unassigned.
	recheck time.Duration
	refused refusals // assignments refused from lying leaders

	rejoin chan struct{} // RequestRejoin
}

// New checks cfg; it starts nothing.
func New(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Member{
		cfg: cfg, log: cfg.Logger.With("group", cfg.Group), addr: kafka.TCP(cfg.Brokers...),
		since: cfg.Now(), rejoin: make(chan struct{}, 1),
	}, nil
}

// State reports the current generation, whether the member is in it, and
// since when it has been out of one (zero while in one).
func (m *Member) State() (gen Generation, joined bool, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, m.joined, m.since
}

// RequestRejoin makes the member leave its generation and join again;
// with fresh, as a new member (its member ID dropped): what a member does
// after its membership went nowhere for too long.
func (m *Member) RequestRejoin(fresh bool) {
	if fresh {
		m.mu.Lock()
		m.fresh = true
		m.mu.Unlock()
	}
	select {
	case m.rejoin <- struct{}{}:
	default:
	}
}

// Release takes partitions out of the member's owned set without telling
// the handler (their owner stopped them already: a checkpoint of theirs
// was fenced) and rejoins, so that the leader assigns them again.
func (m *Member) Release(partitions []int) {
	m.mu.Lock()
	m.owned = diff(m.owned, partitions)
	m.mu.Unlock()
	m.RequestRejoin(false)
}

// Forfeit makes the member give up its partitions as lost (the handler's
// Lost, no final commits) and join again: its owner found that it lost its
// generation (a commit rejected as stale, a pause past the session
// timeout) before the coordinator said so.
func (m *Member) Forfeit() {
	m.mu.Lock()
	m.forfeit = true
	m.mu.Unlock()
	select {
	case m.rejoin <- struct{}{}:
	default:
	}
}

func (m *Member) setJoined(joined bool) {
	m.mu.Lock()
	changed := m.joined != joined
	m.joined = joined
	switch {
	case joined:
		m.since = time.Time{}
	case m.since.IsZero():
		m.since = m.cfg.Now()
	}
	m.mu.Unlock()
	if changed && m.cfg.OnState != nil {
		m.cfg.OnState(joined)
	}
}

// errFatal wraps errors that end Run.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// outcome of a stable phase.
type outcome int

const (
	outRebalance outcome = iota // rejoin, keeping what the generation allows
	outLost                     // membership lost: partitions lost, rejoin
	outDone                     // ctx ended
)

// Run joins the group and keeps the membership until ctx ends, telling h
// what the member's partitions become. At the end it revokes what it
// owns (h.Revoked) and, as a dynamic member, leaves the group; a static
// member does not leave, so that its restart within the session timeout
// does not move its partitions. It returns nil after ctx ended, or an
// error that ends the membership (another member with the same
// InstanceID, refused access, settings the coordinator rejects).
func (m *Member) Run(ctx context.Context, h Handler) error {
	b := joinBackoff(m.cfg.RetryBackoff)
	var err error
	everJoined := false
	for ctx.Err() == nil {
		var gen Generation
		var assigned []int
		gen, assigned, err = m.joinAndSync(ctx, h)
		if err != nil {
			var fatal errFatal
			if errors.As(err, &fatal) {
				break
			}
			if ctx.Err() != nil {
				break
			}
			if m.cfg.OnJoinError != nil {
				if stop := m.cfg.OnJoinError(err, everJoined); stop != nil {
					err = errFatal{stop}
					break
				}
			}
			m.log.Debug("joining the group failed; retrying", "err", err, "backoff", b.Delay())
			b.Wait(ctx, 0)
			continue
		}
		b.Reset()
		everJoined = true
		out, ferr := m.stable(ctx, h, gen, assigned)
		if ferr != nil {
			err = ferr
			break
		}
		err = nil
		switch out {
		case outLost:
			m.mu.Lock()
			lost := m.owned
			m.owned, m.prev = nil, nil
			m.mu.Unlock()
			if len(lost) > 0 {
				h.Lost(lost, ErrNotMember)
			}
		}
	}
	// Whatever is still owned (Run ended outside a generation: a failed
	// join) is given up; its commits may fail, and then the next owner
	// recovers from the output as after any failed commit.
	m.mu.Lock()
	gen := m.gen
	m.mu.Unlock()
	m.revokeAll(gen, h)
	m.setJoined(false)
	if m.cfg.InstanceID == "" {
		m.leave()
	}
	var fatal errFatal
	if errors.As(err, &fatal) {
		return fatal.err
	}
	return nil
}

func (m *Member) revokeAll(gen Generation, h Handler) {
	m.mu.Lock()
	owned := m.owned
	m.owned, m.prev, m.prevGen = nil, owned, gen.ID
	m.mu.Unlock()
	if len(owned) > 0 {
		h.Revoked(gen, owned)
	}
}

// protocols are the member's JoinGroup protocols with its subscription:
// the topic, the user data and the partitions it owns.
func (m *Member) protocols() []joingroup.RequestProtocol {
	m.mu.Lock()
	owned, gen := slices.Clone(m.owned), m.gen.ID
	if len(owned) == 0 {
		owned, gen = slices.Clone(m.prev), m.prevGen
	}
	m.mu.Unlock()
	sub := subscription{Topics: []string{m.cfg.Topic}, UserData: m.cfg.UserData, Generation: noGeneration}
	if len(owned) > 0 {
		ps := make([]int32, len(owned))
		for i, p := range owned {
			ps[i] = int32(p)
		}
		sub.Owned = []topicPartitions{{Topic: m.cfg.Topic, Partitions: ps}}
		sub.Generation = gen
	}
	meta := encodeSubscription(sub)
	ps := []joingroup.RequestProtocol{{Name: ProtocolEager, Metadata: meta}}
	if !m.cfg.Eager {
		ps = append([]joingroup.RequestProtocol{{Name: ProtocolCooperative, Metadata: meta}}, ps...)
	}
	return ps
}

// roundTrip sends req to the group's coordinator (the Transport finds it)
// within timeout.
func (m *Member) roundTrip(ctx context.Context, timeout time.Duration, req protocol.Message) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return m.cfg.Transport.RoundTrip(ctx, m.addr, req)
}

// joinAndSync joins a generation and syncs its assignment.
func (m *Member) joinAndSync(ctx context.Context, h Handler) (Generation, []int, error) {
	m.setJoined(false)
	protos := m.protocols()
	m.mu.Lock()
	if m.fresh {
		m.memberID, m.fresh = "", false
	}
	memberID := m.memberID
	rejoinAsStatic := m.cfg.InstanceID != "" && memberID == "" && len(m.owned) == 0 && len(m.prev) == 0
	m.mu.Unlock()
	if rejoinAsStatic {
		if err := m.announcePrevious(ctx); err != nil {
			m.log.Debug("reading the group's members to rejoin as the same static member failed", "err", err)
		}
		protos = m.protocols()
	}
	var jr *joingroup.Response
	for attempt := 0; ; attempt++ {
		req := &joingroup.Request{
			GroupID:            m.cfg.Group,
			SessionTimeoutMS:   int32(m.cfg.SessionTimeout / time.Millisecond),
			RebalanceTimeoutMS: int32(m.cfg.RebalanceTimeout / time.Millisecond),
			MemberID:           memberID,
			GroupInstanceID:    m.cfg.InstanceID,
			ProtocolType:       "consumer",
			Protocols:          protos,
		}
		// The coordinator answers within the rebalance timeout of the
		// rebalance's start; beyond that the answer is lost.
		res, err := m.roundTrip(ctx, m.cfg.RebalanceTimeout+5*time.Second, req)
		if err != nil {
			return Generation{}, nil, fmt.Errorf("joining: %w", err)
		}
		jr = res.(*joingroup.Response)
		code := kafka.Error(jr.ErrorCode)
		switch {
		case jr.ErrorCode == 0:
		case code == kafka.MemberIDRequired && attempt < 3:
			// KIP-394: join again with the ID the coordinator handed out.
			memberID = jr.MemberID
			m.mu.Lock()
			m.memberID = memberID
			m.mu.Unlock()
			continue
		case code == kafka.UnknownMemberId:
			m.mu.Lock()
			m.memberID = ""
			lost := m.owned
			m.owned, m.prev = nil, nil
			m.mu.Unlock()
			if len(lost) > 0 {
				h.Lost(lost, code)
			}
			return Generation{}, nil, fmt.Errorf("joining: %w", code)
		case code == kafka.FencedInstanceID:
			return Generation{}, nil, errFatal{fmt.Errorf("joining group %q: another member uses the instance id %q (%w): %s",
				m.cfg.Group, m.cfg.InstanceID, code, fencedFix)}
		case code == kafka.GroupAuthorizationFailed || code == kafka.InvalidSessionTimeout || code == kafka.InconsistentGroupProtocol:
			return Generation{}, nil, errFatal{fmt.Errorf("joining group %q: %w", m.cfg.Group, code)}
		default:
			return Generation{}, nil, fmt.Errorf("joining: %w", code)
		}
		break
	}
	gen := Generation{ID: jr.GenerationID, MemberID: jr.MemberID, Protocol: jr.ProtocolName, Leader: jr.LeaderID == jr.MemberID}
	m.mu.Lock()
	m.memberID = jr.MemberID
	held, last := len(m.owned) > 0, m.gen
	m.mu.Unlock()
	if held && !gen.Cooperative() {
		m.yieldToEager(ctx, h, last, gen)
	}

	var assignments []syncgroup.RequestAssignment
	if gen.Leader {
		var err error
		if assignments, err = m.leaderAssign(ctx, gen, last, jr.Members); err != nil {
			return Generation{}, nil, err
		}
	}
	res, err := m.roundTrip(ctx, m.cfg.RebalanceTimeout+m.cfg.SessionTimeout, &syncgroup.Request{
		GroupID:         m.cfg.Group,
		GenerationID:    gen.ID,
		MemberID:        gen.MemberID,
		GroupInstanceID: m.cfg.InstanceID,
		ProtocolType:    "consumer",
		ProtocolName:    gen.Protocol,
		Assignments:     assignments,
	})
	if err != nil {
		return Generation{}, nil, fmt.Errorf("syncing: %w", err)
	}
	sr := res.(*syncgroup.Response)
	if sr.ErrorCode != 0 {
		code := kafka.Error(sr.ErrorCode)
		switch code {
		case kafka.FencedInstanceID:
			return Generation{}, nil, errFatal{fmt.Errorf("syncing group %q: another member uses the instance id %q (%w): %s",
				m.cfg.Group, m.cfg.InstanceID, code, fencedFix)}
		case kafka.UnknownMemberId, kafka.IllegalGeneration:
			m.mu.Lock()
			lost := m.owned
			m.owned, m.prev = nil, nil
			if code == kafka.UnknownMemberId {
				m.memberID = ""
			}
			m.mu.Unlock()
			if len(lost) > 0 {
				h.Lost(lost, code)
			}
		}
		return Generation{}, nil, fmt.Errorf("syncing: %w", code)
	}
	tps, err := decodeAssignment(sr.Assignments)
	if err != nil {
		return Generation{}, nil, fmt.Errorf("decoding the assignment of leader %s: %w", jr.LeaderID, err)
	}
	assigned := partitionsOf(tps, m.cfg.Topic)
	if !gen.Leader {
		if assigned, err = m.checkAssignment(ctx, jr.LeaderID, tps, assigned); err != nil {
			return Generation{}, nil, err
		}
	}
	m.mu.Lock()
	m.gen = gen
	m.mu.Unlock()
	return gen, assigned, nil
}

// yieldToEager gives up every partition the member kept from its last,
// cooperative, generation (last) when the new one (gen) turned out eager:
// a member that offers only eager protocols joined (an older build,
// kcat, a console consumer). Every eager member gave its partitions up
// before it joined; this one learns the protocol only from the join's
// answer, and gives them up before the assignment is handed out (as the
// leader, before it assigns; as a follower, before it syncs, and the
// leader does not move partitions claimed from a cooperative generation:
// leaderAssign), so that no partition runs here while the new generation
// gives it to another member. Heartbeats of the new generation keep the
// membership meanwhile; the final commits fail (the group is between
// generations) and the next owner recovers from the output, as after any
// failed commit.
func (m *Member) yieldToEager(ctx context.Context, h Handler, last, gen Generation) {
	m.mu.Lock()
	owned := m.owned
	m.mu.Unlock()
	m.log.Info("the group rebalances eagerly from this generation on; giving up every partition before the assignment",
		"partitions", owned, "generation", gen.ID, "protocol", gen.Protocol)
	hctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.heartbeats(hctx, gen, make(chan heartbeatResult, 2))
	}()
	m.revokeAll(last, h)
	stop()
	<-done
}

// announcePrevious looks up the member that had this member's instance id
// and, if the group still has it, announces in the coming JoinGroup what
// that member owned, as its own: the coordinator kept its assignment
// (nobody else owns those partitions), and a static member that rejoins
// with the same subscription is let in without a rebalance — Apache Kafka
// only asks that the group's protocol would not change, the embedded
// broker that the subscription is the same bytes. The partitions are not
// running here yet: they are started when the assignment names them.
func (m *Member) announcePrevious(ctx context.Context) error {
	res, err := m.roundTrip(ctx, m.cfg.SessionTimeout, &describegroups.Request{Groups: []string{m.cfg.Group}})
	if err != nil {
		return err
	}
	for _, g := range res.(*describegroups.Response).Groups {
		if g.ErrorCode != 0 || g.GroupState != "Stable" {
			continue
		}
		for _, gm := range g.Members {
			if gm.GroupInstanceID != m.cfg.InstanceID {
				continue
			}
			sub, err := decodeSubscription(gm.MemberMetadata)
			if err != nil {
				return err
			}
			prev := partitionsOf(sub.Owned, m.cfg.Topic)
			m.mu.Lock()
			if len(m.owned) == 0 {
				m.prev, m.prevGen = prev, sub.Generation
			}
			m.mu.Unlock()
		}
	}
	return nil
}

// leaderAssign computes the generation's assignment from the members'
// subscriptions. last is the generation this member was in before.
//
// What members claim to own is checked before it counts: a claim of a
// partition the topic does not have, or of a generation that has not
// been, is dropped; if this member led the generation the claims are from,
// a claim counts only where its assignment gave that partition to that
// member; otherwise the newest generation's claim of a partition counts.
// A member that claims what it does not hold cannot keep partitions from
// being assigned for more than one rebalance: where a partition is left
// unassigned for a claim this member could not confirm, it rejoins as soon
// as the generation is stable, and leads the next one knowing the truth.
func (m *Member) leaderAssign(ctx context.Context, gen, last Generation, members []joingroup.ResponseMember) ([]syncgroup.RequestAssignment, error) {
	n, err := m.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	all := make([]MemberInfo, 0, len(members))
	for _, jm := range members {
		sub, err := decodeSubscription(jm.Metadata)
		if err != nil {
			m.log.Warn("a member's subscription does not decode; it gets no partitions", "member", jm.MemberID, "err", err)
			sub = subscription{Generation: noGeneration}
		}
		all = append(all, MemberInfo{ID: jm.MemberID, InstanceID: jm.GroupInstanceID, UserData: sub.UserData,
			Owned: partitionsOf(sub.Owned, m.cfg.Topic), Generation: sub.Generation, undecodable: err != nil})
	}
	plans := m.plans
	if len(plans) > 0 && plans[len(plans)-1].gen != last.ID {
		plans = nil // this member's last generation was not one it led
	}
	all, dropped, contested, confirmed := vetClaims(all, n, gen.ID, plans)
	for _, d := range dropped {
		m.log.Warn("ignoring partitions a member claims to own: "+d.why, "member", d.member, "partitions", summarize(d.partitions), "generation", gen.ID)
	}
	admitted := slices.DeleteFunc(slices.Clone(all), func(mi MemberInfo) bool { return mi.undecodable })
	if m.cfg.Admit != nil {
		admitted = m.cfg.Admit(admitted)
	}
	// An eager generation after a cooperative one: members kept their
	// partitions until they learnt the protocol (yieldToEager), so a
	// partition one of them claims goes to nobody else in this generation.
	transition := !gen.Cooperative() && (last.ID != gen.ID-1 || last.Cooperative())
	withContested := all
	if len(contested) > 0 {
		withContested = append(slices.Clone(all), MemberInfo{ID: contestedMember, Owned: contested})
	}
	assignment := assign(withContested, admitted, n, gen.Cooperative() || transition)
	given := 0
	for _, ps := range assignment {
		given += len(ps)
	}
	switch {
	case given == n || len(admitted) == 0:
	case transition || !confirmed:
		// Held up by claims this member could not confirm: the next
		// generation, led with this one's assignment, judges them.
		m.recheck = time.Nanosecond
	default:
		// Held for members that own them and are to give them up and
		// rejoin; one that does not (it claims what it does not give up)
		// is not waited for beyond a rebalance timeout.
		m.recheck = m.cfg.RebalanceTimeout
	}
	m.proposed = newPlan(gen.ID, all, assignment)
	m.log.Info("elected group leader; assigning partitions", "members", len(all), "admitted", len(admitted),
		"partitions", n, "unassigned", n-given, "protocol", gen.Protocol, "generation", gen.ID)
	out := make([]syncgroup.RequestAssignment, 0, len(all))
	for _, mi := range all {
		out = append(out, syncgroup.RequestAssignment{MemberID: mi.ID, Assignment: encodeAssignment(m.cfg.Topic, assignment[mi.ID])})
	}
	return out, nil
}

// checkAssignment checks the assignment a leader handed this member
// (tps, whose partitions of the topic are assigned, sorted) and returns
// the partitions to run: those of the topic, within the topic's partition
// count, each once. Whatever else it holds is refused, with an ERROR
// naming the leader, and the member rejoins after a while (sooner a
// leader that read stale metadata, later one that keeps lying): no
// partition that does not exist gets a goroutine, a checkpoint or a
// metric series.
func (m *Member) checkAssignment(ctx context.Context, leader string, tps []topicPartitions, assigned []int) ([]int, error) {
	var problems []string
	for _, tp := range tps {
		if tp.Topic != m.cfg.Topic {
			problems = append(problems, fmt.Sprintf("%d partitions of topic %q, which the group does not consume", len(tp.Partitions), tp.Topic))
		}
	}
	uniq := slices.Compact(slices.Clone(assigned))
	if d := len(assigned) - len(uniq); d > 0 {
		problems = append(problems, fmt.Sprintf("%d partitions listed more than once", d))
	}
	m.mu.Lock()
	n := m.partitionsSeen
	m.mu.Unlock()
	if len(uniq) > 0 && uniq[len(uniq)-1] >= n {
		var err error
		if n, err = m.partitionCount(ctx); err != nil {
			return nil, err
		}
	}
	lo, _ := slices.BinarySearch(uniq, 0)
	hi, _ := slices.BinarySearch(uniq, n)
	if bad := append(slices.Clone(uniq[:lo]), uniq[hi:]...); len(bad) > 0 {
		problems = append(problems, fmt.Sprintf("%d partitions %s that topic %q does not have (it has %d)", len(bad), summarize(bad), m.cfg.Topic, n))
	}
	valid := uniq[lo:hi]
	if len(problems) == 0 {
		m.refused.reset()
		return valid, nil
	}
	wait := m.refused.next()
	m.log.Error(fmt.Sprintf("group %s: the group's leader, member %s, assigned this member %s; refused: running only %s, and rejoining in %v",
		m.cfg.Group, leader, strings.Join(problems, "; "), summarize(valid), wait),
		"leader", leader, "refused", len(assigned)-len(valid))
	if m.cfg.OnRefused != nil {
		m.cfg.OnRefused(leader)
	}
	return valid, nil
}

// partitionCount asks the brokers how many partitions the topic has.
func (m *Member) partitionCount(ctx context.Context) (int, error) {
	c := &kafka.Client{Addr: m.addr, Transport: m.cfg.Transport}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{m.cfg.Topic}})
	if err != nil {
		return 0, fmt.Errorf("reading the partitions of %q: %w", m.cfg.Topic, err)
	}
	for _, t := range md.Topics {
		if t.Name == m.cfg.Topic {
			if t.Error != nil {
				return 0, fmt.Errorf("reading the partitions of %q: %w", m.cfg.Topic, t.Error)
			}
			m.mu.Lock()
			m.partitionsSeen = len(t.Partitions)
			m.mu.Unlock()
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("reading the partitions of %q: not in the answer", m.cfg.Topic)
}

// stable applies a generation's assignment and heartbeats until the
// generation ends. Heartbeats run in their own goroutine from the start,
// so that the handler's Revoked (cooperative) keeps the membership.
func (m *Member) stable(ctx context.Context, h Handler, gen Generation, assigned []int) (outcome, error) {
	m.setJoined(true)
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	beats := make(chan heartbeatResult, 2)
	go m.heartbeats(hctx, gen, beats)

	m.mu.Lock()
	owned := m.owned
	m.mu.Unlock()
	// An eager member owns nothing here (it gave everything up before it
	// joined, or yieldToEager did); a cooperative one gives up what the
	// leader moved before anything of the new generation runs.
	revoked, added := diff(owned, assigned), diff(assigned, owned)
	if gen.Leader && m.proposed != nil && m.proposed.gen == gen.ID {
		m.plans = append(m.plans, m.proposed)
		if len(m.plans) > maxPlans {
			m.plans = m.plans[1:]
		}
	} else {
		m.plans = nil // another member led: its assignment is not this member's to vouch for
	}
	m.proposed = nil
	h.Joined(gen, assigned)
	if len(revoked) > 0 {
		h.Revoked(gen, revoked)
	}
	m.mu.Lock()
	m.owned, m.prev = union(diff(owned, revoked), added), nil
	m.mu.Unlock()
	if len(added) > 0 {
		h.Assigned(gen, added)
	}
	if len(revoked) > 0 {
		// The partitions given up go to others in the next rebalance.
		m.log.Info("revoked partitions the leader moved; rejoining so that they can be assigned", "revoked", revoked, "generation", gen.ID)
		return outRebalance, nil
	}
	var again <-chan time.Time
	var why string
	wait := m.refused.pending()
	if wait > 0 {
		why = "the leader's assignment was refused"
	}
	if m.recheck > 0 && (wait == 0 || m.recheck < wait) {
		wait, why = m.recheck, "partitions were left unassigned"
	}
	m.recheck = 0
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		again = t.C
	}
	var r heartbeatResult
	select {
	case <-ctx.Done():
		r.out = outDone
	case <-again:
		m.log.Info("rejoining: "+why, "generation", gen.ID, "after", wait)
		r.out = outRebalance
	case <-m.rejoin:
		r.out = outRebalance
		m.mu.Lock()
		if m.forfeit {
			m.forfeit, r.out = false, outLost
		}
		m.mu.Unlock()
	case r = <-beats:
	}
	if r.err == nil && r.out != outLost {
		// Give up what the next generation cannot keep while the
		// heartbeats keep this one: an eager member everything before it
		// rejoins, every member everything when it stops. The generation
		// stands until the member rejoins, so the final commits count.
		if r.out == outDone || !gen.Cooperative() {
			m.revokeAll(gen, h)
		}
	}
	return r.out, r.err
}

type heartbeatResult struct {
	out outcome
	err error
}

// heartbeats sends a heartbeat every interval until the generation ends
// (a rebalance, the membership lost) or ctx ends, and reports which.
// Failures to reach the coordinator are retried; once no heartbeat went
// through for a whole session timeout, the coordinator has expired the
// member: its partitions are lost.
func (m *Member) heartbeats(ctx context.Context, gen Generation, out chan<- heartbeatResult) {
	t := time.NewTicker(m.cfg.HeartbeatInterval)
	defer t.Stop()
	lastOK := m.cfg.Now()
	noticed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := m.roundTrip(ctx, m.cfg.SessionTimeout, &coordinatedHeartbeat{
			GroupID: m.cfg.Group, GenerationID: gen.ID, MemberID: gen.MemberID, GroupInstanceID: m.cfg.InstanceID,
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if code := heartbeatError(res.(*heartbeat.Response)); code != 0 {
				err = kafka.Error(code)
			}
		}
		switch {
		case err == nil:
			lastOK = m.cfg.Now()
			continue
		case errors.Is(err, kafka.RebalanceInProgress):
			// The generation stands until this member rejoins: keep the
			// session alive meanwhile (an eager member revokes first).
			lastOK = m.cfg.Now()
			if !noticed {
				noticed = true
				out <- heartbeatResult{out: outRebalance}
			}
			continue
		case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration):
			m.log.Warn("the coordinator no longer knows this member's generation; its partitions are lost", "err", err, "generation", gen.ID)
			if errors.Is(err, kafka.UnknownMemberId) {
				m.mu.Lock()
				m.memberID = ""
				m.mu.Unlock()
			}
			out <- heartbeatResult{out: outLost}
			return
		case errors.Is(err, kafka.FencedInstanceID):
			out <- heartbeatResult{out: outLost, err: errFatal{fmt.Errorf("group %q: another member took the instance id %q (%w): %s",
				m.cfg.Group, m.cfg.InstanceID, err, fencedFix)}}
			return
		}
		if d := m.cfg.Now().Sub(lastOK); d > m.cfg.SessionTimeout {
			m.log.Warn("no heartbeat went through for longer than the session timeout; the coordinator has expired this member",
				"for", d.Round(time.Millisecond), "err", err)
			out <- heartbeatResult{out: outLost}
			return
		}
		m.log.Debug("heartbeat failed; retrying", "err", err)
	}
}

// coordinatedHeartbeat is a Heartbeat request that the Transport sends to
// the group's coordinator. kafka-go's heartbeat.Request does not name its
// group to the Transport (it has no Group method, unlike JoinGroup,
// SyncGroup, LeaveGroup and the offset requests), so the Transport sends
// it to the bootstrap broker: in a cluster of several brokers that is the
// coordinator only by chance, every other heartbeat is answered
// NOT_COORDINATOR, and the member expires after a session timeout. The
// type has heartbeat.Request's layout, which kafka-go's encoder reads.
type coordinatedHeartbeat heartbeat.Request

func (r *coordinatedHeartbeat) ApiKey() protocol.ApiKey { return protocol.Heartbeat }

// Group routes the request to the coordinator (protocol.GroupMessage).
func (r *coordinatedHeartbeat) Group() string { return r.GroupID }

// heartbeatError reads the error code of a Heartbeat response. kafka-go's
// heartbeat.Response lists ErrorCode before ThrottleTimeMs, but from v1 on
// Kafka sends the throttle time first: decoded with kafka-go's layout, the
// error code lands in the low 16 bits of ThrottleTimeMs and ErrorCode
// holds the high bits of the throttle time (0 below 65 s). At v0 only
// ErrorCode is sent and ThrottleTimeMs stays 0. Either way the code is the
// OR of the two.
func heartbeatError(r *heartbeat.Response) int16 {
	return r.ErrorCode | int16(uint16(r.ThrottleTimeMs))
}

// leave sends LeaveGroup (dynamic members), so that the group rebalances
// at once instead of after the session timeout.
func (m *Member) leave() {
	m.mu.Lock()
	id := m.memberID
	m.mu.Unlock()
	if id == "" {
		return
	}
	_, err := m.roundTrip(context.Background(), 5*time.Second, &leavegroup.Request{
		GroupID: m.cfg.Group, MemberID: id,
		Members: []leavegroup.RequestMember{{MemberID: id, GroupInstanceID: m.cfg.InstanceID}},
	})
	if err != nil {
		m.log.Debug("leaving the group failed", "err", err)
	}
}

// Commit commits offsets of the member's partitions in its current
// generation. ErrRebalancing: retry once the member is in a generation
// again; ErrNotMember (wrapped with the coordinator's error): the member's
// generation is gone, its partitions are not its own any more.
func (m *Member) Commit(ctx context.Context, offsets map[int]int64) error {
	m.mu.Lock()
	gen, joined := m.gen, m.joined
	m.mu.Unlock()
	if !joined {
		return ErrRebalancing
	}
	req := &offsetcommit.Request{GroupID: m.cfg.Group, GenerationID: gen.ID, MemberID: gen.MemberID, GroupInstanceID: m.cfg.InstanceID}
	t := offsetcommit.RequestTopic{Name: m.cfg.Topic}
	for p, o := range offsets {
		t.Partitions = append(t.Partitions, offsetcommit.RequestPartition{PartitionIndex: int32(p), CommittedOffset: o, CommittedLeaderEpoch: -1})
	}
	req.Topics = []offsetcommit.RequestTopic{t}
	res, err := m.roundTrip(ctx, m.cfg.SessionTimeout, req)
	if err != nil {
		return fmt.Errorf("committing offsets: %w", err)
	}
	for _, rt := range res.(*offsetcommit.Response).Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode == 0 {
				continue
			}
			code := kafka.Error(rp.ErrorCode)
			switch code {
			case kafka.RebalanceInProgress:
				m.RequestRejoin(false)
				return fmt.Errorf("committing offsets: %w (%w)", ErrRebalancing, code)
			case kafka.IllegalGeneration, kafka.UnknownMemberId, kafka.FencedInstanceID:
				return fmt.Errorf("committing offsets: %w (%w)", ErrNotMember, code)
			}
			return fmt.Errorf("committing offsets of %s/%d: %w", rt.Name, rp.PartitionIndex, code)
		}
	}
	return nil
}

// FetchOffsets returns the group's committed offsets of partitions (-1:
// none).
func (m *Member) FetchOffsets(ctx context.Context, partitions []int) (map[int]int64, error) {
	ps := make([]int32, len(partitions))
	for i, p := range partitions {
		ps[i] = int32(p)
	}
	res, err := m.roundTrip(ctx, m.cfg.SessionTimeout, &offsetfetch.Request{
		GroupID: m.cfg.Group, Topics: []offsetfetch.RequestTopic{{Name: m.cfg.Topic, PartitionIndexes: ps}},
	})
	if err != nil {
		return nil, fmt.Errorf("fetching committed offsets: %w", err)
	}
	r := res.(*offsetfetch.Response)
	if r.ErrorCode != 0 {
		return nil, fmt.Errorf("fetching committed offsets: %w", kafka.Error(r.ErrorCode))
	}
	out := map[int]int64{}
	for _, p := range partitions {
		out[p] = -1
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("fetching the committed offset of %s/%d: %w", t.Name, p.PartitionIndex, kafka.Error(p.ErrorCode))
			}
			out[int(p.PartitionIndex)] = p.CommittedOffset
		}
	}
	return out, nil
}

// diff returns the elements of a (sorted) not in b.
func diff(a, b []int) []int {
	var out []int
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []int) []int {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// fencedFix is what a member fenced for its instance id is told.
const fencedFix = "each member needs its own --group-instance-id (with auto, its pod name: " +
	"two workers with one id take turns fencing each other); set a unique one, or none for a dynamic member"

// maxPlans bounds the assignments a leader keeps to judge claims with: a
// member that missed that many syncs in a row has lost its membership.
const maxPlans = 4

// refusals counts the assignments refused in a row; each rejoin after one
// waits twice as long as the last, from a second up to a minute.
type refusals struct {
	n    int
	wait time.Duration // before the next rejoin; 0: none planned
}

func (r *refusals) reset() { r.n, r.wait = 0, 0 }

func (r *refusals) next() time.Duration {
	r.wait = min(time.Second<<min(r.n, 6), time.Minute)
	r.n++
	return r.wait
}

// pending returns the planned wait once, then 0.
func (r *refusals) pending() time.Duration {
	w := r.wait
	r.wait = 0
	return w
}

// summarize lists partitions briefly: all of a few, else the first and
// last ones of many.
func summarize(ps []int) string {
	if len(ps) <= 8 {
		return fmt.Sprint(ps)
	}
	return fmt.Sprintf("[%d %d %d … %d %d] (%d)", ps[0], ps[1], ps[2], ps[len(ps)-2], ps[len(ps)-1], len(ps))
}

// joinBackoff is the wait between failed joins: first, doubled up to
// maxRetryBackoff (first itself when longer).
func joinBackoff(first time.Duration) *backoff.Backoff {
	return backoff.New(first, max(first, maxRetryBackoff))
}

// CommitOffsets commits the member's topic's offsets in offsets (the
// Committer's view of a member), within 30 s.
func (m *Member) CommitOffsets(offsets map[string]map[int]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.Commit(ctx, offsets[m.cfg.Topic])
}
