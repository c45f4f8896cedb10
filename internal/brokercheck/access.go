package brokercheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/describeacls"
	"github.com/segmentio/kafka-go/protocol/describegroups"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
)

// Access answers, for a preflight, whether the brokers grant each of the
// client's Needs, without changing anything on them. Three sources, in
// this order:
//
//  1. the operations the brokers' authorizer reports for the principal
//     (KIP-430: Metadata for topics, DescribeGroups for the group). This
//     is the brokers' own decision, super users and
//     allow.everyone.if.no.acl.found included; brokers before Kafka 2.3 do
//     not report it;
//  2. for READ, a probe: an OffsetCommit for a member that does not exist.
//     The brokers check READ on the group and on every topic named before
//     they look at the member, and then refuse it (UNKNOWN_MEMBER_ID or
//     ILLEGAL_GENERATION): nothing is committed;
//  3. for WRITE, which no request can test without writing, the ACL
//     listing (DescribeAcls), if the principal may read it (DESCRIBE on
//     the cluster). It cannot see super users, so a grant missing from it
//     is reported as unknown, not as denied.
//
// What none of them settles stays Unknown, with the reason.

// Verdict is what a preflight found about one Need.
type Verdict int

const (
	// Unknown: the brokers did not say (see Grant.Note).
	Unknown Verdict = iota
	// Allowed: the principal has the ACL.
	Allowed
	// Denied: the principal lacks it; Grant.Fix grants it.
	Denied
)

func (v Verdict) String() string {
	switch v {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	}
	return "unknown"
}

// Ways a verdict was reached, for Grant.How.
const (
	HowAuthorizedOps = "authorized operations"
	HowProbe         = "probe"
	HowACLListing    = "ACL listing"
	HowNoAuthorizer  = "no authorizer"
)

// Grant is the verdict on one Need.
type Grant struct {
	Need    Need
	Verdict Verdict
	// How says where the verdict comes from (the How constants).
	How string
	// Note says why a verdict is Unknown, or what a Denied one rests on.
	Note string
	// Fix is a kafka-acls.sh command that grants the Need (Denied and
	// Unknown).
	Fix string
}

// String is the need and the verdict, for messages.
func (g Grant) String() string {
	s := fmt.Sprintf("%s: %s", g.Need, g.Verdict)
	if g.How != "" {
		s += " (" + g.How + ")"
	}
	return s
}

// Access decides every Need of c. topics is what Topics answered about the
// topics the needs name (a topic missing from it, or with an error other
// than an authorization failure, leaves its needs Unknown). It returns an
// error only when the brokers cannot be reached for a question it has to
// ask; a refused question leaves its needs Unknown.
func (c *Client) Access(ctx context.Context, topics []Topic) ([]Grant, error) {
	byName := map[string]Topic{}
	for _, t := range topics {
		byName[t.Name] = t
	}
	grants := make([]Grant, len(c.Needs))
	for i, n := range c.Needs {
		g := Grant{Need: n}
		if n.Resource == TopicResource {
			t, ok := byName[n.Name]
			switch {
			case !ok:
				g.Note = "the brokers did not describe the topic"
			case errors.Is(t.Err, kafka.TopicAuthorizationFailed):
				g.Verdict, g.How = Denied, HowAuthorizedOps
				g.Note = "the principal may not even DESCRIBE the topic"
			case t.Err != nil:
				g.Note = fmt.Sprintf("the topic is not usable (%v)", t.Err)
			default:
				if allowed, known := t.Allows(n.Op); known {
					g.How = HowAuthorizedOps
					g.Verdict = Denied
					if allowed {
						g.Verdict = Allowed
					}
				}
			}
		}
		grants[i] = g
	}
	if err := c.groupOps(ctx, grants); err != nil {
		return nil, err
	}
	if err := c.probeRead(ctx, grants, byName); err != nil {
		return nil, err
	}
	if err := c.listACLs(ctx, grants); err != nil {
		return nil, err
	}
	for i := range grants {
		g := &grants[i]
		if g.Verdict != Allowed {
			g.Fix = c.grant(g.Need)
		}
		if g.Verdict == Unknown && g.Note == "" {
			g.Note = "the brokers did not say"
		}
	}
	return grants, nil
}

// groupOps decides the group needs from DescribeGroups' authorized
// operations. READ implies DESCRIBE in Kafka's ACLs, so a group the
// principal may not describe is one it may not read.
func (c *Client) groupOps(ctx context.Context, grants []Grant) error {
	for i := range grants {
		g := &grants[i]
		if g.Need.Resource != GroupResource || g.Verdict != Unknown {
			continue
		}
		pc, err := c.coordinator(ctx, g.Need.Name)
		if err != nil {
			var ke kafka.Error
			if errors.As(err, &ke) && ke == kafka.GroupAuthorizationFailed {
				g.Verdict, g.How, g.Note = Denied, HowAuthorizedOps, "the principal may not even DESCRIBE the group"
				continue
			}
			return err
		}
		msg, err := pc.RoundTrip(&describegroups.Request{Groups: []string{g.Need.Name}, IncludeAuthorizedOperations: true})
		pc.Close()
		if err != nil {
			return fmt.Errorf("describing group %q: %w", g.Need.Name, err)
		}
		res := msg.(*describegroups.Response)
		if len(res.Groups) != 1 {
			continue
		}
		rg := res.Groups[0]
		switch {
		case rg.ErrorCode == int16(kafka.GroupAuthorizationFailed):
			g.Verdict, g.How, g.Note = Denied, HowAuthorizedOps, "the principal may not even DESCRIBE the group"
		case rg.ErrorCode != 0:
			g.Note = fmt.Sprintf("DescribeGroups: %v", kafka.Error(rg.ErrorCode))
		case rg.AuthorizedOperations > 0: // 0: not answered; INT32_MIN: not computed
			g.How, g.Verdict = HowAuthorizedOps, Denied
			if rg.AuthorizedOperations&(1<<g.Need.Op) != 0 {
				g.Verdict = Allowed
			}
		}
	}
	return nil
}

// probeMember is the member ID of the READ probe: no group has it, so the
// coordinator refuses the commit after the authorization checks.
const probeMember = "bloomgate-check-probe"

// probeRead decides the READ needs left unknown with one OffsetCommit per
// group need: generation 1 (a negative one would be a commit of a
// consumer outside any group, which an empty group takes) for a member no
// group has, for partition 0 of every topic with an undecided READ need.
func (c *Client) probeRead(ctx context.Context, grants []Grant, topics map[string]Topic) error {
	for i := range grants {
		gn := &grants[i]
		if gn.Need.Resource != GroupResource || gn.Need.Op != Read {
			continue
		}
		var ask []int // indexes of the grants this probe decides
		if gn.Verdict == Unknown {
			ask = append(ask, i)
		}
		req := &offsetcommit.Request{GroupID: gn.Need.Name, GenerationID: 1, MemberID: probeMember}
		for j, g := range grants {
			t, ok := topics[g.Need.Name]
			if g.Need.Resource != TopicResource || g.Need.Op != Read || g.Verdict != Unknown || !ok || t.Err != nil {
				continue
			}
			ask = append(ask, j)
			req.Topics = append(req.Topics, offsetcommit.RequestTopic{Name: g.Need.Name,
				Partitions: []offsetcommit.RequestPartition{{PartitionIndex: 0, CommittedOffset: 0, CommittedLeaderEpoch: -1}}})
		}
		if len(ask) == 0 || len(req.Topics) == 0 {
			// A probe without a topic tells nothing: brokers answer an
			// empty commit without checking anything.
			continue
		}
		pc, err := c.coordinator(ctx, gn.Need.Name)
		if err != nil {
			var ke kafka.Error
			if errors.As(err, &ke) && ke == kafka.GroupAuthorizationFailed {
				gn.Verdict, gn.How = Denied, HowProbe
				continue
			}
			return err
		}
		msg, err := pc.RoundTrip(req)
		pc.Close()
		if err != nil {
			return fmt.Errorf("probing READ on group %q: %w", gn.Need.Name, err)
		}
		codes := map[string]kafka.Error{}
		for _, t := range msg.(*offsetcommit.Response).Topics {
			for _, p := range t.Partitions {
				codes[t.Name] = kafka.Error(p.ErrorCode)
			}
		}
		groupDenied := false
		for _, code := range codes {
			groupDenied = groupDenied || code == kafka.GroupAuthorizationFailed
		}
		for _, j := range ask {
			g := &grants[j]
			if g.Need.Resource == GroupResource {
				decide(g, groupDenied, !groupDenied && len(codes) > 0, kafka.GroupAuthorizationFailed)
				continue
			}
			code, ok := codes[g.Need.Name]
			if groupDenied || !ok {
				g.Note = "the probe was refused for the group before the topic was checked"
				continue
			}
			decide(g, code == kafka.TopicAuthorizationFailed, probeRefusedMember(code), code)
		}
	}
	return nil
}

// decide records a probe's answer: denied, allowed (refused only for the
// member), or unknown with the code it got.
func decide(g *Grant, denied, allowed bool, code kafka.Error) {
	switch {
	case denied:
		g.Verdict, g.How = Denied, HowProbe
	case allowed:
		g.Verdict, g.How = Allowed, HowProbe
	default:
		g.Note = fmt.Sprintf("the probe got %v", code)
	}
}

// probeRefusedMember: the coordinator refused the probe for its member,
// after the authorization checks passed.
func probeRefusedMember(code kafka.Error) bool {
	switch code {
	case kafka.UnknownMemberId, kafka.IllegalGeneration, kafka.RebalanceInProgress, kafka.GroupIdNotFound:
		return true
	}
	return false
}

// ACL listing codes (Kafka's AclOperation, AclPermissionType,
// PatternType).
const (
	aclAny       = 1
	aclAll       = 2
	aclDeny      = 2
	aclAllow     = 3
	patternMatch = 2 // MATCH: literal, prefixed and wildcard patterns covering the name
)

// listACLs decides the WRITE needs left unknown from the ACL listing, if
// the principal may read it. No authorizer (SECURITY_DISABLED) allows
// everything.
func (c *Client) listACLs(ctx context.Context, grants []Grant) error {
	var undecided []int
	for i, g := range grants {
		if g.Verdict == Unknown && g.Need.Op == Write && g.Need.Resource == TopicResource {
			undecided = append(undecided, i)
		}
	}
	if len(undecided) == 0 {
		return nil
	}
	pc, err := c.anyBroker(ctx)
	if err != nil {
		return err
	}
	defer pc.Close()
	principal := c.principalName()
	for _, i := range undecided {
		g := &grants[i]
		msg, err := pc.RoundTrip(&describeacls.Request{Filter: describeacls.ACLFilter{
			ResourceTypeFilter: 2, // topic
			ResourceNameFilter: g.Need.Name, ResourcePatternTypeFilter: patternMatch,
			Operation: aclAny, PermissionType: aclAny,
		}})
		if err != nil {
			return fmt.Errorf("listing the ACLs of topic %q: %w", g.Need.Name, err)
		}
		res := msg.(*describeacls.Response)
		switch code := kafka.Error(res.ErrorCode); {
		case code == kafka.SecurityDisabled:
			g.Verdict, g.How = Allowed, HowNoAuthorizer
			continue
		case code != 0:
			g.Note = fmt.Sprintf("the brokers report no authorized operations, no request tests WRITE without writing, and the ACL listing was refused (%v)", code)
			continue
		}
		allow, deny := false, false
		for _, r := range res.Resources {
			for _, a := range r.ACLs {
				if (a.Principal != principal && a.Principal != "User:*") || (a.Operation != int8(Write) && a.Operation != aclAll) {
					continue
				}
				switch a.PermissionType {
				case aclAllow:
					allow = true
				case aclDeny:
					deny = true
				}
			}
		}
		switch {
		case deny:
			g.Verdict, g.How, g.Note = Denied, HowACLListing, "an ACL denies it"
		case allow:
			g.Verdict, g.How = Allowed, HowACLListing
		default:
			g.Note = "no ACL in the listing grants it (super users and allow.everyone.if.no.acl.found do not show there)"
		}
	}
	return nil
}

// anyBroker connects to the first bootstrap broker that answers.
func (c *Client) anyBroker(ctx context.Context) (*protocol.Conn, error) {
	var last error
	for _, addr := range c.Brokers {
		pc, err := c.connect(ctx, addr)
		if err == nil {
			c.deadline(ctx, pc)
			return pc, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("no broker address")
	}
	return nil, last
}

// coordinator connects to the coordinator of group.
func (c *Client) coordinator(ctx context.Context, group string) (*protocol.Conn, error) {
	pc, err := c.anyBroker(ctx)
	if err != nil {
		return nil, err
	}
	msg, err := pc.RoundTrip(&findcoordinator.Request{Key: group})
	pc.Close()
	if err != nil {
		return nil, fmt.Errorf("finding the coordinator of group %q: %w", group, err)
	}
	res := msg.(*findcoordinator.Response)
	if res.ErrorCode != 0 {
		return nil, fmt.Errorf("finding the coordinator of group %q: %w", group, kafka.Error(res.ErrorCode))
	}
	cc, err := c.connect(ctx, net.JoinHostPort(res.Host, strconv.Itoa(int(res.Port))))
	if err != nil {
		return nil, err
	}
	c.deadline(ctx, cc)
	return cc, nil
}

// deadline bounds the requests on pc by ctx, or by requestTimeout.
func (c *Client) deadline(ctx context.Context, pc *protocol.Conn) {
	if d, ok := ctx.Deadline(); ok {
		_ = pc.SetDeadline(d)
	} else {
		_ = pc.SetDeadline(time.Now().Add(c.requestTimeout()))
	}
}
