package group

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/describegroups"
)

// Described is one member of the group as the coordinator describes it.
type Described struct {
	ID, InstanceID, ClientID, Host string
	// Consumer: its metadata is the consumer protocol (any Kafka consumer
	// is); UserData is what it announced there.
	Consumer bool
	UserData []byte
	// Assigned are the partitions of the topic its assignment holds,
	// sorted; Other counts partitions of other topics.
	Assigned []int
	Other    int
}

// Description is the group as the coordinator describes it.
type Description struct {
	State    string
	Protocol string
	Members  []Described
}

// Describe asks the coordinator for the group's members and their
// assignments (DescribeGroups). It reads every member's metadata with the
// consumer protocol's reader, which takes any version a client writes:
// kafka-go's DescribeGroups fails the whole answer on a member whose
// metadata is of a version it does not know (librdkafka, Java and franz-go
// write versions 2 and 3).
func (m *Member) Describe(ctx context.Context) (Description, error) {
	res, err := m.roundTrip(ctx, m.cfg.SessionTimeout, &describegroups.Request{Groups: []string{m.cfg.Group}})
	if err != nil {
		return Description{}, fmt.Errorf("describing group %q: %w", m.cfg.Group, err)
	}
	for _, g := range res.(*describegroups.Response).Groups {
		if g.GroupID != m.cfg.Group {
			continue
		}
		if g.ErrorCode != 0 {
			return Description{}, fmt.Errorf("describing group %q: %w", m.cfg.Group, kafka.Error(g.ErrorCode))
		}
		d := Description{State: g.GroupState, Protocol: g.ProtocolData}
		for _, gm := range g.Members {
			dm := Described{ID: gm.MemberID, InstanceID: gm.GroupInstanceID, ClientID: gm.ClientID, Host: gm.ClientHost}
			if sub, err := decodeSubscription(gm.MemberMetadata); err == nil && g.ProtocolType == "consumer" {
				dm.Consumer, dm.UserData = true, sub.UserData
			}
			if tps, err := decodeAssignment(gm.MemberAssignment); err == nil {
				dm.Assigned = partitionsOf(tps, m.cfg.Topic)
				for _, tp := range tps {
					if tp.Topic != m.cfg.Topic {
						dm.Other += len(tp.Partitions)
					}
				}
			}
			d.Members = append(d.Members, dm)
		}
		return d, nil
	}
	return Description{}, fmt.Errorf("describing group %q: not in the answer", m.cfg.Group)
}

// PartitionCount returns the topic's partition count as the member last
// read it, reading it if it has not.
func (m *Member) PartitionCount(ctx context.Context) (int, error) {
	m.mu.Lock()
	n := m.partitionsSeen
	m.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	return m.partitionCount(ctx)
}
