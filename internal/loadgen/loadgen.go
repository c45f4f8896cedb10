package loadgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
)

// Message key modes.
const (
	KeyModeDedup = "dedup" // message key = dedup key: duplicates share a partition
	KeyModeNone  = "none"  // null message key: events spread over partitions
)

// Config configures a load run.
type Config struct {
	GenConfig

	Brokers []string
	Topic   string
	// Rate is the target events per second; 0 means as fast as possible.
	Rate int
	// KeyMode is dedup (default) or none.
	KeyMode string
	// BatchSize is the number of events handed to the writer per call and
	// its batch size; default 10000. BatchTimeout defaults to 1ms.
	BatchSize    int
	BatchTimeout time.Duration
	// Compression is the codec of the written batches: "" or none, gzip,
	// snappy, lz4 or zstd (kafka-go's writers; the frames the brokers
	// keep are what a kafka-go producer sends).
	Compression string
	// Transport carries TLS/SASL settings; nil uses kafka-go's default.
	Transport kafka.RoundTripper
	// SASLUsername is the user the Transport's SASL mechanism logs in as,
	// for messages about refused logins and missing ACLs.
	SASLUsername string
	// Progress, if set, is called about every ProgressInterval (default 1s)
	// and once at the end, from the goroutine running Run.
	Progress         func(Stats)
	ProgressInterval time.Duration
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if err := c.GenConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers: give at least one host:port"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %d: must be 0 (unlimited) or positive", c.Rate))
	}
	if c.KeyMode != "" && c.KeyMode != KeyModeDedup && c.KeyMode != KeyModeNone {
		errs = append(errs, fmt.Errorf("key mode %q: use dedup or none", c.KeyMode))
	}
	if c.BatchSize < 0 || c.BatchTimeout < 0 {
		errs = append(errs, errors.New("batch size and timeout must not be negative"))
	}
	if _, err := codec(c.Compression); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Compressions lists the values Config.Compression takes.
const Compressions = "none, gzip, snappy, lz4 or zstd"

// codec is kafka-go's codec for name (0: none).
func codec(name string) (kafka.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("compression %q: use %s", name, Compressions)
}

// Stats are the counts of a run so far. Unique + Duplicates = Events.
type Stats struct {
	Events             int64 // events acknowledged by the broker
	Unique             int64 // events that introduced a new key
	Duplicates         int64 // events that repeated an earlier key
	AdjacentDuplicates int64 // of which repeated one of the last few keys
	Bytes              int64 // value bytes written
	Elapsed            time.Duration
	Done               bool // the run finished (final call of Progress)
}

// Rate is the events per second so far.
func (s Stats) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Events) / s.Elapsed.Seconds()
}

func (s Stats) String() string {
	return fmt.Sprintf("%d events (%d unique, %d duplicates, %d adjacent) in %v, %.0f ev/s",
		s.Events, s.Unique, s.Duplicates, s.AdjacentDuplicates, s.Elapsed.Round(time.Millisecond), s.Rate())
}

// Run writes the configured events to the topic and returns what it wrote.
// The counts cover acknowledged events only; on error or cancellation they
// are the ground truth of what reached the broker before (a failed batch may
// still have been partly written).
func Run(ctx context.Context, cfg Config) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 10000
	}
	if cfg.BatchTimeout == 0 {
		cfg.BatchTimeout = time.Millisecond
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = time.Second
	}
	gen, err := NewGenerator(cfg.GenConfig)
	if err != nil {
		return Stats{}, err
	}
	if err := checkAccess(ctx, cfg); err != nil {
		return Stats{}, err
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     kafka.Murmur2Balancer{}, // the Java client's default partitioner
		BatchSize:    cfg.BatchSize,
		BatchBytes:   64 << 20,
		BatchTimeout: cfg.BatchTimeout,
		RequiredAcks: kafka.RequireAll,
		Transport:    cfg.Transport,
	}
	w.Compression, _ = codec(cfg.Compression) // validated above
	defer w.Close()

	chunk := cfg.BatchSize
	if cfg.Rate > 0 {
		// Small chunks keep a limited rate smooth: about 50 writes a second.
		chunk = max(1, min(chunk, cfg.Rate/50))
	}
	var (
		st       Stats
		start    = time.Now()
		lastProg = start
		msgs     = make([]kafka.Message, 0, chunk)
		evs      = make([]Event, 0, chunk)
	)
	report := func(done bool) {
		if cfg.Progress != nil {
			st.Elapsed = time.Since(start)
			st.Done = done
			cfg.Progress(st)
		}
	}
	for {
		msgs, evs = msgs[:0], evs[:0]
		for len(msgs) < chunk {
			ev, ok := gen.Next()
			if !ok {
				break
			}
			m := kafka.Message{Value: ev.Value, Time: ev.Time}
			if cfg.KeyMode != KeyModeNone {
				m.Key = ev.Key
			}
			msgs = append(msgs, m)
			evs = append(evs, ev)
		}
		if len(msgs) == 0 {
			break
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			st.Elapsed = time.Since(start)
			report(true)
			return st, fmt.Errorf("writing events %d..%d: %w", st.Events, st.Events+int64(len(msgs)), err)
		}
		for _, ev := range evs {
			st.Events++
			st.Bytes += int64(len(ev.Value))
			if ev.Duplicate {
				st.Duplicates++
				if ev.Adjacent {
					st.AdjacentDuplicates++
				}
			} else {
				st.Unique++
			}
		}
		if cfg.Rate > 0 {
			due := start.Add(time.Duration(float64(st.Events) / float64(cfg.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					st.Elapsed = time.Since(start)
					report(true)
					return st, ctx.Err()
				case <-time.After(d):
				}
			}
		}
		if now := time.Now(); now.Sub(lastProg) >= cfg.ProgressInterval {
			lastProg = now
			report(false)
		}
	}
	st.Elapsed = time.Since(start)
	report(true)
	return st, nil
}

// checkAccess asks the brokers about the topic once before writing: a
// refused login, a missing WRITE ACL or a TLS mismatch ends the run at once
// (brokercheck) instead of after the writer's retries, each of which would
// log in again. Other failures are left to the writer, which reports them.
func checkAccess(ctx context.Context, cfg Config) error {
	c := &brokercheck.Client{Brokers: cfg.Brokers, Username: cfg.SASLUsername, Component: "loadgen",
		Needs: []brokercheck.Need{{Resource: brokercheck.TopicResource, Name: cfg.Topic, Setting: "--topic", Op: brokercheck.Write}}}
	if tr, ok := cfg.Transport.(*kafka.Transport); ok && tr != nil {
		c.TLS, c.SASL = tr.TLS, tr.SASL
	}
	topics, err := c.Topics(ctx, []string{cfg.Topic})
	if e := c.Diagnose(ctx, err); e != nil {
		e.Attempts = 1
		return e
	}
	if err != nil {
		return nil
	}
	if e := c.CheckTopics(topics); e != nil {
		e.Attempts = 1
		return e
	}
	return nil
}
