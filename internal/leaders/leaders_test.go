package leaders

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// cachedLeader is the leader of topic's partition 0 in t's metadata cache
// (kafka-go's Transport answers Metadata requests from it).
func cachedLeader(t *testing.T, tr *kafka.Transport, brokers []string, topic string) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := tr.RoundTrip(ctx, kafka.TCP(brokers...), &metadata.Request{TopicNames: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range m.(*metadata.Response).Topics {
		for _, p := range tp.Partitions {
			if tp.Name == topic && p.PartitionIndex == 0 {
				return p.LeaderID
			}
		}
	}
	t.Fatalf("no partition 0 of %s in the cached metadata", topic)
	return -1
}

// TestRefreshFindsMovedLeader: after a partition's leader moved, the
// Transport's cached metadata (its periodic refresh is off here) names the
// old leader until Refresh, and the new one after it — on a broker that
// implements CreateTopics, which receives none, and on one that does not
// implement it (as librdkafka's mock cluster).
func TestRefreshFindsMovedLeader(t *testing.T) {
	noCreateTopics := kversion.Stable()
	noCreateTopics.SetMaxKeyVersion(kmsg.CreateTopics.Int16(), -1)
	for _, tc := range []struct {
		name string
		opts []kfake.Opt
	}{
		{"CreateTopics implemented", nil},
		{"CreateTopics not implemented", []kfake.Opt{kfake.MaxVersions(noCreateTopics)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(append([]kfake.Opt{kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(1, "t")}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var creates atomic.Int32
			c.ControlKey(kmsg.CreateTopics.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				creates.Add(1)
				return nil, nil, false
			})
			brokers := c.ListenAddrs()
			tr := &kafka.Transport{MetadataTTL: time.Hour}
			t.Cleanup(tr.CloseIdleConnections)
			r := New(tr, brokers)

			old := cachedLeader(t, tr, brokers, "t")
			if old != c.LeaderFor("t", 0) {
				t.Fatalf("cached leader %d, the cluster's %d", old, c.LeaderFor("t", 0))
			}
			moved := (old + 1) % 3
			if err := c.MoveTopicPartition("t", 0, moved); err != nil {
				t.Fatal(err)
			}
			if got := cachedLeader(t, tr, brokers, "t"); got != old {
				t.Fatalf("cached leader %d before the refresh, want the old %d (the test needs a stale cache)", got, old)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := cachedLeader(t, tr, brokers, "t"); got != moved {
				t.Fatalf("cached leader %d after the refresh, want %d", got, moved)
			}
			if n := creates.Load(); n != 0 {
				t.Errorf("the broker received %d CreateTopics requests, want none", n)
			}
		})
	}
}
