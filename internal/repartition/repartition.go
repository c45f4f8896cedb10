// Package repartition is the first hop of a two-stage dedup: it reads an
// input topic that is not keyed by the dedup key, extracts and normalizes
// the key of every record, and writes the record to an internal topic keyed
// by the hash of the canonical key, so that every copy of a key lands in the
// same partition there and one per-partition filter downstream sees them
// all.
//
// The hop is at-least-once: offsets are committed only after the writes
// they cover were acknowledged, and a crash or rebalance re-reads and
// re-writes what was not committed. The copies this creates are exact
// repeats of a key, which the dedup stage behind removes; end to end every
// canonical key is forwarded once and nothing is lost.
//
// Written records keep value, headers and timestamp; their Kafka key is the
// 32 hex digits of murmur3-128 of the canonical key (unkeyed: the
// partitioning must be the same on every worker), and they gain
// bloomgate-origin-partition / bloomgate-origin-offset headers naming the
// input record, for tracing. A record whose key cannot be extracted is
// written with a null key and a bloomgate-error header naming the reason;
// the dedup stage's on-missing-key policy then decides (its key is the Kafka
// key, so it sees null_key).
//
// The hop writes as the dedup stage does, through internal/producer
// (write.go): batches it encodes, acks=all, each partition's batches in
// order, leader moves retried after a metadata refresh, batches bounded
// by the repartition topic's max.message.bytes, compressed like the
// input's batches (or with --compression), and records the repartition
// topic cannot take placed by the dedup stage's --on-unwritable.
//
// Cost per record: one key extraction and one 128-bit hash, then its
// bytes appended to a batch; the group, fetching and committing work as
// in the worker.
package repartition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/fetcher"
	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/producer"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Header names added to every record written.
const (
	HeaderOriginPartition = worker.HeaderOriginPartition
	HeaderOriginOffset    = worker.HeaderOriginOffset
	HeaderError           = "bloomgate-error"
)

// Extractor derives the canonical dedup key of a record (*keys.Extractor);
// the reason of its errors (keys.ReasonOf) labels metrics and the
// bloomgate-error header.
type Extractor interface {
	Extract(dst []byte, key, value []byte, headers []kafka.Header) ([]byte, error)
}

// Config of a Repartitioner. Zero durations and sizes take the defaults
// named on each field.
type Config struct {
	Brokers []string
	Group   string // consumer group of the hop
	Input   string
	Output  string // the internal topic
	// Partitions of Output when it has to be created; default: as many as
	// PartitionsLike has (the dedup stage's output, whose partition count
	// the dedup stage wants its input to have), else as Input.
	Partitions     int
	PartitionsLike string
	Isolation      fetcher.Isolation

	// The defaults of BatchSize, MaxBatchBytes, CommitInterval and
	// WriteTimeout are the dedup stage's (worker.Default…).
	BatchSize int // most records per produce batch
	// MaxBatchBytes bounds a produce batch (producer.Batch.Size); lowered
	// to a written topic's max.message.bytes.
	MaxBatchBytes  int64
	CommitInterval time.Duration
	// WriteTimeout bounds one produce request; the writes of
	// one fetch get three times as long before it is read again.
	WriteTimeout time.Duration
	// Compression of the written batches: a codec name
	// (producer.ParseCodec); "": each batch with the codec of the input
	// batch its records came from (fetcher.Chunk.Codec), as the dedup
	// stage's --compression input.
	Compression string
	// DeadLetter is the dedup stage's dead-letter topic ("": none), and
	// OnUnwritable its --on-unwritable (default
	// worker.DefaultOnUnwritable): where a record the repartition topic
	// cannot take goes (write.go).
	DeadLetter   string
	OnUnwritable worker.UnwritablePolicy
	// UnwritableRetry is how often a partition stalled before an
	// unwritable record tries it again (default worker.UnwritableRetry).
	UnwritableRetry time.Duration

	// Zero timings take group.Timings' defaults, as the worker's.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	JoinGroupBackoff  time.Duration
	// InstanceID makes the hop a static member of its group (as the
	// worker's --group-instance-id; "": dynamic).
	InstanceID string

	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// SASLUsername is the user the Transport's SASL mechanism logs in as,
	// for messages about refused logins and missing ACLs.
	SASLUsername string
}

// hopAnnouncement is what a hop announces in its group protocol metadata
// (in the worker's settings format): a leader gives partitions only to
// members that announce it, so that a consumer that is not a hop (kcat
// -G with the hop's group id) takes none of its input.
const hopAnnouncement = `{"v":1,"s":[["repartition-hop","1"]]}`

// admit keeps the members that announce the hop (group.Config.Admit) and
// reports the others, once each.
func (r *Repartitioner) admit(members []group.MemberInfo) []group.MemberInfo {
	out := members[:0:0]
	for _, m := range members {
		if string(m.UserData) == hopAnnouncement {
			out = append(out, m)
			continue
		}
		if _, seen := r.foreign.LoadOrStore(m.ID, true); !seen {
			r.log.Error(fmt.Sprintf("repartition group %s: member %s is not a repartition hop (kcat, a console consumer or another "+
				"client using the hop's group id); it gets no partitions from this member, the group leader. Give other consumers "+
				"their own group id", r.cfg.Group, m.ID), "member", m.ID)
		}
	}
	return out
}

// Validate reports missing settings.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("repartition: at least one broker is required"))
	}
	if c.Input == "" || c.Output == "" {
		errs = append(errs, errors.New("repartition: input and output topics are required"))
	}
	if c.Input != "" && c.Input == c.Output {
		errs = append(errs, fmt.Errorf("repartition: output %q is the input topic", c.Output))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("repartition: a consumer group is required"))
	}
	if c.BatchSize < 0 || c.Partitions < 0 {
		errs = append(errs, errors.New("repartition: batch size and partitions must not be negative"))
	}
	if c.Compression != "" {
		if _, err := producer.ParseCodec(c.Compression); err != nil {
			errs = append(errs, fmt.Errorf("repartition: %w", err))
		}
	}
	switch c.OnUnwritable {
	case "", worker.UnwritableStall, worker.UnwritableDrop:
	case worker.UnwritableDeadLetter:
		if c.DeadLetter == "" {
			errs = append(errs, errors.New("repartition: on-unwritable dead-letter needs a dead-letter topic"))
		}
	default:
		errs = append(errs, fmt.Errorf("repartition: on-unwritable %q is not one of dead-letter|stall|drop", c.OnUnwritable))
	}
	return errors.Join(errs...)
}

func (c *Config) applyDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = worker.DefaultBatchSize
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = worker.DefaultMaxBatchBytes
	}
	if c.OnUnwritable == "" {
		c.OnUnwritable = worker.DefaultOnUnwritable(c.DeadLetter)
	}
	if c.UnwritableRetry == 0 {
		c.UnwritableRetry = worker.UnwritableRetry
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = worker.DefaultCommitInterval
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = worker.DefaultWriteTimeout
	}
	c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval = group.Timings(c.SessionTimeout, c.RebalanceTimeout, c.HeartbeatInterval)
	if c.Dialer == nil {
		c.Dialer = &kafka.Dialer{Timeout: worker.DefaultDialTimeout, DualStack: true}
	}
	if c.Transport == nil {
		c.Transport = &kafka.Transport{DialTimeout: 10 * time.Second}
	}
}

// Repartitioner is one member of the hop's consumer group.
type Repartitioner struct {
	cfg    Config
	log    *slog.Logger
	ex     Extractor
	client *kafka.Client
	// prod writes; outParts are the repartition topic's partitions,
	// dltParts the dead-letter topic's (read at the first dead letter).
	prod     *producer.Producer
	balancer kafka.Murmur2Balancer
	outParts []int
	dltMu    sync.Mutex
	dltParts []int
	// codec compresses every batch; with followInput, each batch takes
	// its input batch's instead.
	codec       producer.Codec
	followInput bool
	batches     sync.Pool // *producer.Batch
	// limits holds the written topics' max.message.bytes (0 or missing:
	// unknown), replaced whole by readLimits.
	limits   atomic.Pointer[map[string]int64]
	limitsMu sync.Mutex
	limitsAt time.Time
	// check explains failures to reach the brokers; access applies the
	// runtime rule to refused access, stopping Run through fail.
	check  *brokercheck.Client
	access *brokercheck.Watch
	fail   context.CancelCauseFunc
	// member is the hop's membership of its group (internal/group).
	member *group.Member
	// foreign holds the member ids of non-hop members already reported.
	foreign sync.Map

	records, badKeys, unwritable *prometheus.CounterVec
	written, retries             prometheus.Counter
}

// New checks cfg; it starts nothing. reg may be nil.
func New(cfg Config, ex Extractor, log *slog.Logger, reg prometheus.Registerer) (*Repartitioner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ex == nil {
		return nil, errors.New("repartition: an extractor is required")
	}
	cfg.applyDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	r := &Repartitioner{
		cfg: cfg, ex: ex, log: log.With("component", "repartition", "input", cfg.Input, "output", cfg.Output),
		fail: func(error) {},
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bloomgate", Name: "repartition_records_total",
			Help: "Input records the repartition hop handled: written to the repartition topic, or placed as unwritable (bloomgate_repartition_unwritable_records_total); re-reads after a crash or a failed write included."}, []string{"topic", "partition"}),
		badKeys: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bloomgate", Name: "repartition_bad_keys_total",
			Help: "Records the repartition hop wrote with a null key because their key could not be extracted."}, []string{"reason"}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "repartition_writes_total",
			Help: "Acknowledged produce requests (record batches) of the repartition hop."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "bloomgate", Name: "repartition_write_retries_total",
			Help: "Produce requests of the repartition hop sent again after the broker's answer proved nothing landed (a leader move); the metadata is refreshed first."}),
		unwritable: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bloomgate", Name: "repartition_unwritable_records_total",
			Help: "Input records the repartition topic cannot take (reason: record_too_large, invalid_record, ...), by where --on-unwritable placed them: dead_lettered, dead_lettered_reference, dropped, or stalled (the partition waits before it; counted once per record)."},
			[]string{"reason", "outcome"}),
	}
	for _, why := range worker.UnwritableReasons {
		for _, o := range unwritableOutcomes {
			r.unwritable.WithLabelValues(why, o)
		}
	}
	if cfg.Compression != "" {
		r.codec, _ = producer.ParseCodec(cfg.Compression) // Validate checked it
	} else {
		r.followInput = true
	}
	r.batches.New = func() any { return new(producer.Batch) }
	r.limits.Store(&map[string]int64{})
	for _, c := range []prometheus.Collector{r.records, r.badKeys, r.written, r.retries, r.unwritable} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering repartition metrics: %w", err)
		}
	}
	r.check = &brokercheck.Client{
		Brokers: cfg.Brokers, TLS: cfg.Transport.TLS, SASL: cfg.Transport.SASL, Username: cfg.SASLUsername,
		Component: "the repartition hop", DialTimeout: cfg.Dialer.Timeout,
		Needs: []brokercheck.Need{
			{Resource: brokercheck.TopicResource, Name: cfg.Input, Setting: "--input", Op: brokercheck.Read},
			{Resource: brokercheck.TopicResource, Name: cfg.Output, Setting: "--repartition", Op: brokercheck.Write},
			{Resource: brokercheck.TopicResource, Name: cfg.Output, Setting: "--repartition", Op: brokercheck.Create, Unless: "the topic exists"},
			{Resource: brokercheck.GroupResource, Name: cfg.Group, Setting: "--repartition", Op: brokercheck.Read},
		},
	}
	if cfg.PartitionsLike != "" {
		r.check.Needs = append(r.check.Needs, brokercheck.Need{Resource: brokercheck.TopicResource, Name: cfg.PartitionsLike, Setting: "--output", Op: brokercheck.Describe})
	}
	if cfg.DeadLetter != "" && cfg.OnUnwritable == worker.UnwritableDeadLetter {
		r.check.Needs = append(r.check.Needs, brokercheck.Need{Resource: brokercheck.TopicResource, Name: cfg.DeadLetter, Setting: "--dead-letter", Op: brokercheck.Write})
	}
	r.access = &brokercheck.Watch{Client: r.check, Log: r.log}
	return r, nil
}

// refused reports whether err is refused access; if so it is logged, or it
// stops Run once the runtime rule says so (brokercheck.Watch).
func (r *Repartitioner) refused(err error) bool {
	refused, stop := r.access.Failed(err)
	if stop != nil {
		r.fail(stop)
	}
	return refused
}

// Run creates the output topic if needed, joins the group and moves records
// until ctx ends; it returns nil then, or the error that stopped it.
func (r *Repartitioner) Run(ctx context.Context) error {
	if err := r.EnsureOutput(ctx); err != nil {
		return err
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.fail = cancel
	// stopped is Run's result once ctx ended: nil after a shutdown, the
	// cause when refused access stopped the hop.
	stopped := func() error {
		if parent.Err() == nil {
			return context.Cause(ctx)
		}
		return nil
	}
	prod, err := producer.New(producer.Config{Transport: r.cfg.Transport, Brokers: r.cfg.Brokers, Timeout: r.cfg.WriteTimeout,
		OnRetry: func(topic string, partition int, err error) {
			r.retries.Inc()
			r.log.Info("repartition write refused before anything landed; metadata refreshed, sending it again",
				"topic", topic, "partition", partition, "err", err)
		}})
	if err != nil {
		return err
	}
	r.prod = prod
	r.readLimits(ctx, true, false)
	m, err := group.New(group.Config{
		Brokers: r.cfg.Brokers, Transport: r.cfg.Transport, Group: r.cfg.Group, Topic: r.cfg.Input,
		InstanceID: r.cfg.InstanceID, ClientID: "bloomgate-repartition",
		UserData: []byte(hopAnnouncement), Admit: r.admit,
		SessionTimeout: r.cfg.SessionTimeout, RebalanceTimeout: r.cfg.RebalanceTimeout, HeartbeatInterval: r.cfg.HeartbeatInterval,
		Logger: r.log,
		OnJoinError: func(err error, everJoined bool) error {
			if e := r.check.Explain(err); e != nil && !everJoined {
				e.Attempts = 1 // a refused login or group ACL at start
				return e
			}
			if !r.refused(err) {
				r.log.Debug("repartition group join failed; retrying", "err", err)
			}
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("creating the repartition group member: %w", err)
	}
	r.member = m
	// As the worker's: partitions stop through the membership (a revoke
	// commits), also at shutdown.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopParts()
	com := group.NewCommitter(m, r.cfg.Input, r.cfg.CommitInterval, r.log, nil, nil)
	parts := group.NewPartitions(partsCtx, m, com)
	com.Fence = parts.Fence
	com.MaxGap = r.cfg.SessionTimeout
	com.Denied = r.refused
	parts.Work = func(ctx context.Context, gen group.Generation, p int) { r.runPartition(ctx, com, p) }
	parts.OnJoined = func(gen group.Generation, assigned []int) {
		r.log.Info("repartition joined generation", "generation", gen.ID, "protocol", gen.Protocol, "partitions", assigned)
	}
	go com.Run()
	defer com.Close()
	r.log.Info("repartition hop started")
	if err := m.Run(ctx, parts); err != nil {
		if e := r.check.Explain(err); e != nil {
			e.Attempts = 1
			return e
		}
		return err
	}
	return stopped()
}

// EnsureOutput creates the output topic unless it exists (see
// Config.Partitions). Run calls it; call it first to have the topic before
// a consumer of it starts.
func (r *Repartitioner) EnsureOutput(ctx context.Context) error {
	if r.client == nil {
		r.client = &kafka.Client{Addr: kafka.TCP(r.cfg.Brokers...), Transport: r.cfg.Transport, Timeout: 30 * time.Second}
	}
	topics := []string{r.cfg.Input, r.cfg.Output}
	if r.cfg.PartitionsLike != "" {
		topics = append(topics, r.cfg.PartitionsLike)
	}
	var md []brokercheck.Topic
	err := r.check.Retry(ctx, r.log, func(ctx context.Context) error {
		var err error
		md, err = r.check.Topics(ctx, topics)
		return err
	})
	if err != nil {
		return err
	}
	if e := r.check.CheckTopics(md); e != nil {
		e.Attempts = 1
		return e
	}
	in, out, like := 0, 0, 0
	for _, t := range md {
		if t.Err != nil {
			continue
		}
		switch t.Name {
		case r.cfg.Input:
			in = t.Partitions
		case r.cfg.Output:
			out = t.Partitions
		case r.cfg.PartitionsLike:
			like = t.Partitions
		}
	}
	if in == 0 {
		return fmt.Errorf("input topic %q does not exist; create it first", r.cfg.Input)
	}
	if out > 0 {
		r.outParts = partitionList(out)
		return nil
	}
	n := r.cfg.Partitions
	if n == 0 {
		n = like
	}
	if n == 0 {
		n = in
	}
	res, err := r.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: r.cfg.Output, NumPartitions: n, ReplicationFactor: -1,
	}}})
	if err == nil {
		err = res.Errors[r.cfg.Output]
	}
	if e := r.check.Explain(err); e != nil {
		e.Attempts = 1
		err = e
	}
	if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("creating the repartition topic %q with %d partitions: %w; create it yourself "+
			"(the dedup stage reads it; it needs as many partitions as the dedup stage's output)", r.cfg.Output, n, err)
	}
	r.log.Info("created the repartition topic", "partitions", n)
	r.outParts = partitionList(n)
	return nil
}

func (r *Repartitioner) firstOffset(ctx context.Context, p int) (int64, error) {
	res, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{r.cfg.Input: {kafka.FirstOffsetOf(p)}}})
	if err != nil {
		return 0, err
	}
	for _, po := range res.Topics[r.cfg.Input] {
		if po.Partition == p {
			if po.Error != nil {
				return 0, po.Error
			}
			return po.FirstOffset, nil
		}
	}
	return 0, fmt.Errorf("listing offsets of %s/%d: partition missing", r.cfg.Input, p)
}

// reasonOf reads the reason of an extraction error, "other" if it has none.
func reasonOf(err error) string {
	if r := keys.ReasonOf(err); r != "" {
		return r
	}
	return "other"
}
