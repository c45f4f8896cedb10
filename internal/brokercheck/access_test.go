package brokercheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/bloomgate/bloomgate/internal/broker"
)

// accessBroker serves orders (input), orders-unique (output) and
// orders-dup (duplicates) to the user "worker", who may read the input,
// read the output but not write it, write the duplicates, and read the
// group "dedup". The user "lister" may list the ACLs and write the
// duplicates. The superuser "admin" may do everything.
func accessBroker(t *testing.T) *broker.Broker {
	t.Helper()
	acl := func(r kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: r, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	topic := kmsg.ACLResourceTypeTopic
	return startBroker(t, broker.Config{
		Topics: []broker.TopicSpec{{Name: "orders", Partitions: 2}, {Name: "orders-unique", Partitions: 2}, {Name: "orders-dup", Partitions: 2}},
		ACLs:   true,
		Users: []broker.User{
			{Mechanism: "SCRAM-SHA-256", Username: "worker", Password: "pw", ACLs: []kfake.ACL{
				acl(topic, "orders", kmsg.ACLOperationRead), acl(topic, "orders-unique", kmsg.ACLOperationRead),
				acl(topic, "orders-dup", kmsg.ACLOperationRead), acl(topic, "orders-dup", kmsg.ACLOperationWrite),
				acl(kmsg.ACLResourceTypeGroup, "dedup", kmsg.ACLOperationRead),
			}},
			{Mechanism: "SCRAM-SHA-256", Username: "lister", Password: "pw", ACLs: []kfake.ACL{
				acl(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationDescribe),
				acl(topic, "orders", kmsg.ACLOperationDescribe), acl(topic, "orders-unique", kmsg.ACLOperationDescribe),
				acl(topic, "orders-dup", kmsg.ACLOperationWrite),
			}},
			{Mechanism: "SCRAM-SHA-256", Username: "admin", Password: "pw", Superuser: true},
		},
	})
}

func accessClient(t *testing.T, b *broker.Broker, user, group string) *Client {
	t.Helper()
	m, err := scram.Mechanism(scram.SHA256, user, "pw")
	if err != nil {
		t.Fatal(err)
	}
	return &Client{Brokers: []string{b.Addr()}, SASL: m, Username: user, Component: "the worker", Needs: []Need{
		{Resource: TopicResource, Name: "orders", Setting: "--input", Op: Read},
		{Resource: TopicResource, Name: "orders-unique", Setting: "--output", Op: Write},
		{Resource: TopicResource, Name: "orders-unique", Setting: "--output", Op: Read},
		{Resource: TopicResource, Name: "orders-dup", Setting: "--duplicates", Op: Write},
		{Resource: GroupResource, Name: group, Setting: "--group", Op: Read},
	}}
}

func verdicts(t *testing.T, c *Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := c.Topics(ctx, []string{"orders", "orders-unique", "orders-dup"})
	if err != nil {
		t.Fatal(err)
	}
	grants, err := c.Access(ctx, topics)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, g := range grants {
		lines = append(lines, g.String())
	}
	return strings.Join(lines, "\n")
}

// TestAccessAuthorizedOperations: the brokers' own verdicts (KIP-430) for
// topics and the group.
func TestAccessAuthorizedOperations(t *testing.T) {
	b := accessBroker(t)
	got := verdicts(t, accessClient(t, b, "worker", "other-group"))
	want := `READ on topic "orders" (--input): allowed (authorized operations)
WRITE on topic "orders-unique" (--output): denied (authorized operations)
READ on topic "orders-unique" (--output): allowed (authorized operations)
WRITE on topic "orders-dup" (--duplicates): allowed (authorized operations)
READ on group "other-group" (--group): denied (authorized operations)`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := verdicts(t, accessClient(t, b, "admin", "other-group")); strings.Contains(got, "denied") {
		t.Errorf("a superuser is denied something:\n%s", got)
	}
}

// TestAccessWithoutAuthorizedOperations: with brokers that report no
// authorized operations (before Kafka 2.3), READ is probed with an
// OffsetCommit the coordinator refuses for its member (nothing is
// committed), and WRITE is read from the ACL listing when the principal
// may read it; else it stays unknown, with the grant to check.
func TestAccessWithoutAuthorizedOperations(t *testing.T) {
	b := accessBroker(t)
	c := b.Cluster()
	// Ask the broker for no authorized operations, whatever the client
	// asks: it then answers as brokers before Kafka 2.3 do.
	for _, key := range []int16{int16(kmsg.Metadata), int16(kmsg.DescribeGroups)} {
		c.ControlKey(key, func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			switch r := req.(type) {
			case *kmsg.MetadataRequest:
				r.IncludeTopicAuthorizedOperations = false
			case *kmsg.DescribeGroupsRequest:
				r.IncludeAuthorizedOperations = false
			}
			return nil, nil, false
		})
	}

	got := verdicts(t, accessClient(t, b, "worker", "dedup"))
	want := `READ on topic "orders" (--input): allowed (probe)
WRITE on topic "orders-unique" (--output): unknown
READ on topic "orders-unique" (--output): allowed (probe)
WRITE on topic "orders-dup" (--duplicates): unknown
READ on group "dedup" (--group): allowed (probe)`
	if got != want {
		t.Errorf("worker, its group:\ngot\n%s\nwant\n%s", got, want)
	}
	got = verdicts(t, accessClient(t, b, "worker", "other-group"))
	if !strings.Contains(got, `READ on group "other-group" (--group): denied (probe)`) {
		t.Errorf("worker, a group it may not read:\n%s", got)
	}
	// The probe committed nothing: the group has no offsets.
	admin := accessClient(t, b, "admin", "dedup")
	tr := &kafka.Transport{SASL: admin.SASL}
	kc := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := kc.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: "dedup", Topics: map[string][]int{"orders": {0}, "orders-unique": {0}}})
	if err != nil {
		t.Fatal(err)
	}
	for topic, parts := range res.Topics {
		for _, p := range parts {
			if p.CommittedOffset >= 0 {
				t.Errorf("the probe committed %s/%d at %d", topic, p.Partition, p.CommittedOffset)
			}
		}
	}
	// A user that may list the ACLs: WRITE is read from them.
	got = verdicts(t, accessClient(t, b, "lister", "dedup"))
	for _, want := range []string{`WRITE on topic "orders-dup" (--duplicates): allowed (ACL listing)`, `WRITE on topic "orders-unique" (--output): unknown`} {
		if !strings.Contains(got, want) {
			t.Errorf("lister: no %q in\n%s", want, got)
		}
	}
	// The superuser may list the ACLs: WRITE is read from them (it has
	// none of its own, which the listing cannot tell from a denial).
	got = verdicts(t, accessClient(t, b, "admin", "dedup"))
	if !strings.Contains(got, `WRITE on topic "orders-unique" (--output): unknown`) {
		t.Errorf("superuser:\n%s", got)
	}
}
