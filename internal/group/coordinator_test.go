package group

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestHeartbeatsReachTheCoordinator: in a cluster of three brokers, with a
// bootstrap broker that is not the group's coordinator, a member's
// heartbeats go to the coordinator: it keeps its partitions for several
// session timeouts (sent to the bootstrap broker they were answered
// NOT_COORDINATOR, and the member was expired every session timeout).
func TestHeartbeatsReachTheCoordinator(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(2, "t"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	coord := c.CoordinatorFor("g")
	bootstrap := addrs[(int(coord)+1)%len(addrs)]
	m, err := New(Config{Brokers: []string{bootstrap}, Group: "g", Topic: "t", Logger: slog.New(slog.DiscardHandler),
		SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, handler{r, "a"}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "a owns the partitions", func() bool { return len(r.ownedBy("a")) == 2 })
	time.Sleep(3500 * time.Millisecond) // three session timeouts and a half
	if n := r.count("a lost"); n != 0 {
		t.Fatalf("the member lost its partitions %d times in 3.5 s with a session timeout of 1 s", n)
	}
}
