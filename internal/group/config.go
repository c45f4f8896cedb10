package group

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// Config configures one member of a consumer group.
type Config struct {
	// Brokers are the bootstrap addresses; Transport carries every request
	// (TLS and SASL set on it). Group requests go to the group's
	// coordinator: the Transport looks it up.
	Brokers   []string
	Transport kafka.RoundTripper
	Group     string
	// Topic is the one topic the member consumes.
	Topic string
	// InstanceID makes the member static (KIP-345): a member restarted
	// with the same InstanceID within the session timeout gets its
	// partitions back without a rebalance, and a static member leaving
	// (Run's ctx ends) does not send LeaveGroup, so its restart does not
	// move its partitions either. Empty: a dynamic member.
	InstanceID string
	// ClientID names the member in the coordinator's view (DescribeGroups).
	ClientID string

	// Zero timings take the defaults of Timings.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// RetryBackoff is the first wait after a failed join or sync, doubled
	// up to 1s (maxRetryBackoff) or kept when longer. Default 200ms.
	RetryBackoff time.Duration

	// UserData is announced in the member's subscription (the group
	// protocol metadata); the leader sees every member's.
	UserData []byte
	// Admit, if set, is called on the leader with the members of a
	// rebalance and returns those that may get partitions (see
	// worker/agreement.go). The leader itself must be among them.
	Admit func(members []MemberInfo) []MemberInfo
	// OnRefused, if set, is called when the member refused (part of) the
	// assignment the group's leader handed it: partitions of another
	// topic, that the topic does not have, or listed twice.
	OnRefused func(leader string)
	// OnState, if set, is called when the member enters (true) or leaves
	// (false) a generation.
	OnState func(joined bool)
	// OnJoinError, if set, is called with every failed join or sync
	// (everJoined: the member was in a generation before); a non-nil
	// result ends Run with it (a refused login before the first
	// generation, say). Otherwise the member retries.
	OnJoinError func(err error, everJoined bool) (stop error)
	// Eager disables cooperative rebalancing: the member offers only the
	// eager protocol (every rebalance revokes every partition first).
	Eager bool

	Logger *slog.Logger
	// Now is the member's clock (tests replace it); default time.Now.
	Now func() time.Time
}

// Defaults. The group timings' are the only ones: the worker, the
// repartition hop and `bloomgate run`'s flags take them from here.
const (
	DefaultSessionTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is the heartbeat interval's default, at
	// most a third of the session timeout (Timings).
	DefaultHeartbeatInterval = time.Second
	// RebalanceOverSession is the rebalance timeout's default above the
	// session timeout: members revoke within the session timeout (no
	// heartbeats while they do), and the rebalance waits for them a
	// little longer.
	RebalanceOverSession = 10 * time.Second
	DefaultRetryBackoff  = 200 * time.Millisecond
	// maxRetryBackoff bounds the wait between join attempts, as Java
	// clients' retry.backoff.max.ms (1 s, KIP-580): a longer one delays the
	// rejoin after the coordinator's broker is back by up to that wait
	// (8.7 s on librdkafka's mock cluster with 5 s; docs/worker.md).
	maxRetryBackoff = time.Second
)

// Timings fills in the group timings left zero: the session timeout
// DefaultSessionTimeout, the rebalance timeout RebalanceOverSession above
// the session timeout, the heartbeat interval DefaultHeartbeatInterval but
// at most a third of the session timeout (so that two heartbeats can be
// lost without the member expiring).
func Timings(session, rebalance, heartbeat time.Duration) (time.Duration, time.Duration, time.Duration) {
	if session == 0 {
		session = DefaultSessionTimeout
	}
	if rebalance == 0 {
		rebalance = session + RebalanceOverSession
	}
	if heartbeat == 0 {
		heartbeat = min(DefaultHeartbeatInterval, session/3)
	}
	return session, rebalance, heartbeat
}

// Validate checks the settings a Member cannot work without.
func (c Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("group: no brokers")
	case c.Group == "":
		return errors.New("group: no group id")
	case c.Topic == "":
		return errors.New("group: no topic")
	case c.SessionTimeout < 0 || c.RebalanceTimeout < 0 || c.HeartbeatInterval < 0:
		return errors.New("group: negative timeout")
	case c.HeartbeatInterval > 0 && c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout:
		return fmt.Errorf("group: heartbeat interval %v must be below the session timeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval = Timings(c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval)
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.Transport == nil {
		c.Transport = kafka.DefaultTransport
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ClientID == "" {
		c.ClientID = "bloomgate"
	}
	return c
}
