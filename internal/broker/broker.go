// Package broker runs an in-process Kafka-protocol broker for local use and
// tests: a single-node github.com/twmb/franz-go/pkg/kfake cluster listening on
// one TCP address, which any Kafka client (kafka-go, librdkafka/kcat, the
// Java client) can use.
//
// kfake implements the wire protocol, consumer groups and, with a data
// directory, persistence of topics, records and committed offsets across
// restarts. It is not a replicated or tuned broker: it is meant for a laptop,
// CI and demos.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicSpec is a topic created at start if it does not exist.
type TopicSpec struct {
	Name       string
	Partitions int
}

// ParseTopicSpec parses NAME:PARTITIONS (NAME alone means 1 partition).
func ParseTopicSpec(s string) (TopicSpec, error) {
	name, parts, found := strings.Cut(s, ":")
	t := TopicSpec{Name: strings.TrimSpace(name), Partitions: 1}
	if found {
		n, err := strconv.Atoi(strings.TrimSpace(parts))
		if err != nil {
			return TopicSpec{}, fmt.Errorf("topic %q: partitions %q is not a number (use NAME:PARTITIONS)", s, parts)
		}
		t.Partitions = n
	}
	return t, t.validate()
}

func (t TopicSpec) validate() error {
	if t.Name == "" {
		return errors.New("topic with an empty name (use NAME:PARTITIONS)")
	}
	if t.Partitions < 1 || t.Partitions > 10000 {
		return fmt.Errorf("topic %q: %d partitions, want 1..10000", t.Name, t.Partitions)
	}
	return nil
}

// User is a SASL user that the broker accepts.
type User struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username  string
	Password  string
	// ACLs are what the user may do when Config.ACLs is set (Principal is
	// taken from Username; READ, WRITE, DELETE and ALTER imply DESCRIBE, as
	// in Kafka). Without Config.ACLs, or with Superuser, a user may do
	// everything.
	ACLs      []kfake.ACL
	Superuser bool
}

// Config configures a Broker.
type Config struct {
	// Listen is the TCP address, e.g. 127.0.0.1:9092; port 0 picks a free
	// port. Default 127.0.0.1:0.
	Listen string
	// AdvertisedHost is the host clients are told to connect to. Default:
	// the host of Listen, or 127.0.0.1 when Listen is a wildcard address.
	AdvertisedHost string
	// Topics are created at start when missing (also after a restart with
	// DataDir, where an existing topic keeps its partition count).
	Topics []TopicSpec
	// DataDir enables persistence: topics, records, committed offsets and
	// groups survive a restart. Empty: everything lives in memory.
	DataDir string
	// SyncWrites fsyncs every produced batch (with DataDir): records then
	// survive a power loss, not only a crash of the process, at a cost in
	// throughput. Without it, data written before a kill -9 survives
	// (it is in the page cache), as with Kafka's defaults.
	SyncWrites bool
	// AutoCreateTopics lets producers and metadata requests create unknown
	// topics with DefaultPartitions partitions.
	AutoCreateTopics  bool
	DefaultPartitions int // default 1
	// GroupMinSessionTimeout is the smallest consumer-group session timeout
	// accepted. kfake's default (6s, like Kafka) makes fast-rebalance tests
	// slow; default here 100ms.
	GroupMinSessionTimeout time.Duration
	// GroupRestoreHold: after a restart that restored consumer groups from
	// DataDir, JoinGroup is answered COORDINATOR_LOAD_IN_PROGRESS (which
	// clients retry) for this long. kfake restores a group's generation
	// and offsets but not its members, so without the hold the first
	// member to rejoin forms a generation alone and is assigned
	// partitions that the other members still process until their next
	// heartbeat or commit tells them they are no longer members: two
	// owners at once, records written twice. Kafka keeps a loaded
	// group's members until their sessions expire; the hold gives every
	// member that long to learn. Default 10s, the worker's default
	// session timeout (set the longest session timeout in use); negative:
	// no hold.
	GroupRestoreHold time.Duration
	// TLS, if set, serves TLS with this server configuration.
	TLS *tls.Config
	// Users, if any, enable SASL: clients must authenticate as one of them.
	// A failed authentication is answered as Apache Kafka answers it (error
	// 58, SASL_AUTHENTICATION_FAILED, then the connection closes), and
	// SaslHandshake is advertised from version 0, which librdkafka (kcat)
	// needs (sasl.go).
	Users []User
	// OAuthBearer, if set, makes the listener require SASL OAUTHBEARER,
	// with tokens checked by its Verify (oauth.go); not with Users.
	OAuthBearer *OAuthBearer
	// ACLs checks every request of a user against its User.ACLs, as a
	// Kafka cluster with an authorizer does.
	ACLs bool
	// Logger receives the broker's warnings and errors. Default: discard.
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("listen address %q: %w (use host:port, e.g. 127.0.0.1:9092)", c.Listen, err)
		}
	}
	seen := map[string]bool{}
	for _, t := range c.Topics {
		if err := t.validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("topic %q given twice", t.Name)
		}
		seen[t.Name] = true
	}
	for _, u := range c.Users {
		switch u.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return fmt.Errorf("SASL user %q: mechanism %q, want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Username, u.Mechanism)
		}
		if u.Username == "" {
			return errors.New("SASL user with an empty name")
		}
	}
	if c.OAuthBearer != nil && (len(c.Users) > 0 || c.ACLs) {
		return errors.New("OAuthBearer with Users or ACLs: the OAUTHBEARER front serves one mechanism, without ACLs")
	}
	if c.OAuthBearer != nil && c.OAuthBearer.Verify == nil {
		return errors.New("OAuthBearer without Verify")
	}
	if c.ACLs && len(c.Users) == 0 {
		return errors.New("ACLs need SASL users: without them every client is User:ANONYMOUS and may do nothing")
	}
	if c.DefaultPartitions < 0 || c.GroupMinSessionTimeout < 0 {
		return errors.New("negative DefaultPartitions or GroupMinSessionTimeout")
	}
	return nil
}

// Broker is a running in-process broker.
type Broker struct {
	cfg     Config
	cluster *kfake.Cluster
	addr    string
	keep    *keepalive // nil with TLS or SASL
	oauth   *OAuthStats
	// closing is set by Close before the cluster stops (sasl.go).
	closing *atomic.Bool

	closeOnce sync.Once
}

// New starts a broker: when it returns, the address accepts connections and
// the configured topics exist. Run or Close stops it.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	adv := advertised(ln.Addr().(*net.TCPAddr), cfg.AdvertisedHost)
	closing := new(atomic.Bool)
	var served net.Listener = ln
	oauth := new(OAuthStats)
	switch {
	case len(cfg.Users) > 0:
		// TLS, if any, is terminated below the SASL connections (sasl.go).
		served = &saslListener{Listener: ln, tls: cfg.TLS, closing: closing}
	case cfg.OAuthBearer != nil:
		served = &oauthListener{Listener: ln, tls: cfg.TLS, cfg: cfg.OAuthBearer, stats: oauth}
	}
	used := false
	listenFn := func(network, _ string) (net.Listener, error) {
		if used {
			return nil, errors.New("one listener only")
		}
		used = true
		return &advertisedListener{Listener: served, addr: adv}, nil
	}
	restored := false
	if cfg.DataDir != "" {
		st, err := os.Stat(filepath.Join(cfg.DataDir, "groups.log"))
		restored = err == nil && st.Size() > 0
	}
	c, err := kfake.NewCluster(append(cfg.kfakeOpts(), kfake.ListenFn(listenFn))...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("starting broker: %w", err)
	}
	if restored && cfg.GroupRestoreHold > 0 {
		var held atomic.Pointer[map[string]bool]
		holdJoins(c, time.Now().Add(cfg.GroupRestoreHold), &held)
		// Until the restored groups are known, every group is held.
		if groups, err := listGroups(c.ListenAddrs()[0]); err == nil {
			held.Store(&groups)
		}
	}
	b := &Broker{cfg: cfg, cluster: c, addr: adv.String(), closing: closing, oauth: oauth}
	if cfg.TLS == nil && !cfg.sasl() {
		// An admin connection would need credentials we do not keep; see
		// docs/worker.md for what a TLS or SASL embedded broker lacks.
		if b.keep, err = startKeepalive(c, b.addr); err != nil {
			c.Close()
			return nil, fmt.Errorf("starting broker: %w", err)
		}
	}
	if cfg.DataDir != "" && len(cfg.Topics) > 0 {
		// A restored cluster ignores seed topics; create the missing ones.
		if err := b.ensureTopics(); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

func (cfg *Config) applyDefaults() {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.DefaultPartitions == 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.GroupMinSessionTimeout == 0 {
		cfg.GroupMinSessionTimeout = 100 * time.Millisecond
	}
	if cfg.GroupRestoreHold == 0 {
		cfg.GroupRestoreHold = DefaultGroupRestoreHold
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// kfakeOpts are the cluster's options for cfg, but its listener.
func (cfg *Config) kfakeOpts() []kfake.Opt {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(cfg.DefaultPartitions),
		kfake.GroupMinSessionTimeout(cfg.GroupMinSessionTimeout),
		kfake.WithLogger(slogAdapter{cfg.Logger}),
	}
	for _, t := range cfg.Topics {
		opts = append(opts, kfake.SeedTopics(int32(t.Partitions), t.Name))
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if cfg.AutoCreateTopics {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if cfg.TLS != nil && !cfg.sasl() {
		opts = append(opts, kfake.TLS(cfg.TLS))
	}
	if len(cfg.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range cfg.Users {
			if !cfg.ACLs || u.Superuser {
				opts = append(opts, kfake.Superuser(u.Mechanism, u.Username, u.Password))
			} else {
				opts = append(opts, kfake.User(u.Mechanism, u.Username, u.Password, u.ACLs...))
			}
		}
		if cfg.ACLs {
			opts = append(opts, kfake.EnableACLs())
		}
	}
	return opts
}

// sasl says whether the listener requires SASL.
func (c Config) sasl() bool { return len(c.Users) > 0 || c.OAuthBearer != nil }

// OAuthStats counts the work of the OAUTHBEARER front (Config.OAuthBearer).
func (b *Broker) OAuthStats() *OAuthStats { return b.oauth }

// Addr is the advertised host:port of the broker.
func (b *Broker) Addr() string { return b.addr }

// Cluster exposes the kfake cluster for tests that inject faults.
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Run blocks until ctx ends, then closes the broker (persisting its state
// when a data directory is set). It returns nil on a clean stop.
func (b *Broker) Run(ctx context.Context) error {
	<-ctx.Done()
	b.Close()
	return nil
}

// Close stops the broker: it stops accepting connections, and with a data
// directory writes the final state to disk. Safe to call more than once.
func (b *Broker) Close() {
	b.closeOnce.Do(func() {
		b.closing.Store(true)
		if b.keep != nil {
			b.keep.stop()
		}
		b.cluster.Close()
	})
}

func (b *Broker) ensureTopics() error {
	if b.cfg.TLS != nil || b.cfg.sasl() {
		// The restored state already holds the topics created before; an
		// admin client would need credentials we do not keep.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.CreateTopics(ctx, b.cfg.Topics...)
}

// CreateTopics creates the topics that do not exist yet; an existing topic
// keeps its partition count. Not available on a broker with TLS or SASL.
func (b *Broker) CreateTopics(ctx context.Context, topics ...TopicSpec) error {
	if b.cfg.TLS != nil || b.cfg.sasl() {
		return errors.New("creating topics on a broker with TLS or SASL: give them in Config.Topics")
	}
	for _, t := range topics {
		if err := t.validate(); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	for _, t := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = t.Name
		rt.NumPartitions = int32(t.Partitions)
		rt.ReplicationFactor = 1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", rt.Topic, err)
		}
	}
	return nil
}

func advertised(a *net.TCPAddr, host string) net.Addr {
	if host == "" {
		host = a.IP.String()
		if a.IP.IsUnspecified() {
			host = "127.0.0.1"
		}
	}
	return hostPortAddr(net.JoinHostPort(host, strconv.Itoa(a.Port)))
}

// hostPortAddr is an address that may name a host instead of an IP.
type hostPortAddr string

func (a hostPortAddr) Network() string { return "tcp" }
func (a hostPortAddr) String() string  { return string(a) }

// advertisedListener reports the address clients should use: kfake
// advertises its listener's address in metadata responses.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l *advertisedListener) Addr() net.Addr { return l.addr }

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Logf(level kfake.LogLevel, format string, args ...any) {
	var lvl slog.Level
	switch level {
	case kfake.LogLevelError:
		lvl = slog.LevelError
	case kfake.LogLevelWarn:
		lvl = slog.LevelWarn
	case kfake.LogLevelInfo:
		lvl = slog.LevelDebug // kfake logs every request at info
	default:
		lvl = slog.LevelDebug - 4
	}
	if !a.l.Enabled(context.Background(), lvl) {
		return
	}
	a.l.Log(context.Background(), lvl, fmt.Sprintf(format, args...), "component", "broker")
}

// listGroups lists the consumer groups the broker at addr knows.
func listGroups(addr string) (map[string]bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("bloomgate-broker"), kgo.RequestRetries(2))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	groups := map[string]bool{}
	for _, g := range resp.Groups {
		groups[g.Group] = true
	}
	return groups, nil
}

// DefaultGroupRestoreHold is Config.GroupRestoreHold's default.
const DefaultGroupRestoreHold = 10 * time.Second

// holdJoins answers every JoinGroup of a new member (no member ID) before
// until with COORDINATOR_LOAD_IN_PROGRESS (Config.GroupRestoreHold), so
// that no generation forms. A member from before the restart learns
// from kfake that it is unknown (UNKNOWN_MEMBER_ID) and stops its
// partitions: on its next heartbeat or commit, or at once if it was
// rejoining (a member rejoining a cooperative group keeps processing its
// partitions; answering it LOAD_IN_PROGRESS too would keep it at that
// until the first new member forms a generation without it).
//
// Only the groups restored are held (held; nil: every group, until they
// are known): a group that did not exist before the restart has no member
// to wait for, and refusing it kept a new pipeline waiting for nothing.
func holdJoins(c *kfake.Cluster, until time.Time, held *atomic.Pointer[map[string]bool]) {
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !time.Now().Before(until) {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		jr := req.(*kmsg.JoinGroupRequest)
		if m := held.Load(); jr.MemberID != "" || (m != nil && !(*m)[jr.Group]) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = req.GetVersion()
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		resp.Generation = -1
		return resp, nil, true
	})
}
