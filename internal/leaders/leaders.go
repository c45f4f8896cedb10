// Package leaders keeps a kafka.Transport's view of partition leaders
// current after a leader move.
//
// kafka-go's Transport routes produce and fetch requests by a cached copy of
// the cluster's metadata, which it refreshes every 0-6 s at random
// (Transport.MetadataTTL) and not when a broker answers that it no longer
// leads a partition: after a leader move, requests keep going to the old
// leader until the next refresh. The Transport refreshes at once only after
// a CreateTopics answer (it then waits for the new topics to show in the
// metadata). A Refresher uses that without asking a broker to create
// anything: it hands the Transport a request that the Transport takes for
// a CreateTopics request, but that is never written to the connection and
// answers itself with an empty CreateTopics response (a
// protocol.RawExchanger); the Transport then fetches the metadata again and
// returns once it has it. Nothing is sent besides that Metadata request, so
// it works alike on every broker: those that do not implement CreateTopics
// (librdkafka's mock cluster, where a real CreateTopics request made the
// broker close the connection and the refresh fail, so that leader moves
// were found only by the periodic refresh), and those that would log it or
// check it against ACLs.
//
// Cost: one Metadata round trip per refresh; concurrent callers share one
// refresh, and a refresh is never repeated within MinInterval of the last
// one.
package leaders

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/createtopics"
)

// MinInterval is the least time between two refreshes.
const MinInterval = 100 * time.Millisecond

// Refresher forces metadata refreshes of one Transport for one bootstrap
// address (the Transport keeps one metadata cache per address).
type Refresher struct {
	transport *kafka.Transport
	addr      net.Addr

	mu      sync.Mutex
	running chan struct{} // closed when the refresh in progress ends
	last    time.Time     // when the last refresh ended
}

// New returns a Refresher of t's metadata for the bootstrap brokers (the
// same list, in the same order, as the callers' requests use).
func New(t *kafka.Transport, brokers []string) *Refresher {
	return &Refresher{transport: t, addr: kafka.TCP(brokers...)}
}

// Refresh makes the Transport fetch the cluster's metadata again and waits
// until it has, or ctx ends. A refresh that ended less than MinInterval ago
// counts as fresh; one in progress is waited for.
func (r *Refresher) Refresh(ctx context.Context) error {
	r.mu.Lock()
	if r.running == nil && time.Since(r.last) < MinInterval {
		r.mu.Unlock()
		return nil
	}
	ch := r.running
	lead := ch == nil
	if lead {
		ch = make(chan struct{})
		r.running = ch
	}
	r.mu.Unlock()
	if !lead {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := r.refresh(ctx)
	r.mu.Lock()
	r.running, r.last = nil, time.Now()
	r.mu.Unlock()
	close(ch)
	return err
}

func (r *Refresher) refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The Transport refreshes after every CreateTopics answer and waits
	// for the metadata to name the topics created: none here, so it
	// returns after one refresh.
	_, err := r.transport.RoundTrip(rctx, r.addr, refreshRequest{})
	if err != nil {
		return fmt.Errorf("refreshing metadata: %w", err)
	}
	return nil
}

// refreshRequest is what the Transport takes for a CreateTopics request
// (its ApiKey) and sends to a connection of the cluster; there it answers
// itself (RawExchange: nothing is written or read) with a CreateTopics
// response that names no topic.
type refreshRequest struct{}

func (refreshRequest) ApiKey() protocol.ApiKey { return protocol.CreateTopics }

// Required makes the connection call RawExchange instead of encoding the
// request.
func (refreshRequest) Required(map[protocol.ApiKey]int16) bool { return true }

func (refreshRequest) RawExchange(io.ReadWriter) (protocol.Message, error) {
	return &createtopics.Response{}, nil
}

// Stale reports whether err is a broker's answer that the metadata used
// for a request was out of date: the partition has another leader, the
// leader does not know it (yet), or the leader epoch moved on. Such a
// request was refused before anything was appended or read.
func Stale(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kafka.NotLeaderForPartition, kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable,
		kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch, kafka.BrokerNotAvailable:
		return true
	}
	return false
}
