// Package preflight answers, before a deploy, what `bloomgate run` with
// the same settings would find wrong, without processing anything: the
// topics and their partition counts, the ACLs the worker needs, the
// written topics' max.message.bytes against the input's, the checkpoint
// store (it answers and honours create-only writes), the settings
// recorded in the existing checkpoints against these, exact mode's
// directory and the planned memory (`bloomgate check`).
//
// It reuses the worker's own start-up reads (worker.Worker.Preflight),
// the store's create-only probe (checkpoint.Store.VerifyCreateOnly) and
// the restore's key check (memory.Store.Compatible), so that what it
// reports is what `run` would do. What it changes: one small probe object
// under _probe/ in the checkpoint store, created and deleted (as every
// start does), and a probe file in --exact-dir, created and deleted. It
// writes nothing to Kafka and commits nothing.
//
// Cost: a few metadata and config requests, one manifest listing and one
// manifest read per input partition, four small object requests.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Status is the outcome of one check.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn" // run starts, but something deserves a look
	Fail Status = "fail" // run would refuse to start, or a partition would stop or stall
	Skip Status = "skip" // not checked: something it needs failed first
)

// Check is one line of the report.
type Check struct {
	// Name says what was checked ("topic", "acl", "checkpoints", …);
	// Subject which one ("--input orders"), if there are several.
	Name    string `json:"name"`
	Subject string `json:"subject,omitempty"`
	Status  Status `json:"status"`
	// Detail is what was found; Fix, for a failure or a warning, what to
	// change.
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the outcome of every check, in the order they ran.
type Report struct {
	OK       bool    `json:"ok"` // no failure
	Failures int     `json:"failures"`
	Warnings int     `json:"warnings"`
	Checks   []Check `json:"checks"`
}

func (r *Report) add(c Check) {
	r.Checks = append(r.Checks, c)
	switch c.Status {
	case Fail:
		r.Failures++
	case Warn:
		r.Warnings++
	}
	r.OK = r.Failures == 0
}

// Options are the seams of Run; zero values take the real ones.
type Options struct {
	Logger *slog.Logger // default: discard
	// MemoryLimit is the memory limit of the process's cgroup, 0 if none
	// (default: read from /sys/fs/cgroup).
	MemoryLimit func() uint64
	// FreeBytes is the room left for an unprivileged writer on the file
	// system that holds dir (default: statfs).
	FreeBytes func(dir string) (uint64, error)
	// BrokerWait is how long brokers that do not answer are retried (0:
	// as run waits, brokercheck.StartupBound). bloomgate check waits
	// DefaultBrokerWait: someone is waiting for its answer.
	BrokerWait time.Duration
}

// DefaultBrokerWait is bloomgate check's --broker-wait.
const DefaultBrokerWait = 5 * time.Second

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MemoryLimit == nil {
		o.MemoryLimit = cgroupMemoryLimit
	}
	if o.FreeBytes == nil {
		o.FreeBytes = freeBytes
	}
	return o
}

// Run checks cfg; ctx bounds it (brokers that do not answer are retried
// until ctx ends or brokercheck.StartupBound passes, as at start). The
// error is a setting that cannot be mapped to the worker's (a usage
// error, which Load would have refused); every other finding is in the
// report.
func Run(ctx context.Context, cfg *config.Run, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	wcfg, err := cfg.WorkerConfig()
	if err != nil {
		return nil, err
	}
	ex, err := cfg.Extractor()
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if cfg.Repartition {
		if ex, err = keys.NewExtractor("key", "none", 0); err != nil {
			return nil, err
		}
	}
	r := &Report{OK: true}
	store, storeErr := checkpoint.Open(ctx, cfg.CheckpointURL, checkpoint.Options{Logger: opts.Logger})
	state := memory.New(store, cfg.Group) // a nil store is never used: see checkpoints
	state.Key = cfg.KeyIdentity()
	w, err := worker.New(wcfg, worker.Deps{Logger: opts.Logger, Registerer: prometheus.NewRegistry(), State: state, Extractor: ex})
	if err != nil {
		if store != nil {
			store.Close()
		}
		return nil, err
	}
	// The store is probed while the brokers are asked: brokers that do
	// not answer must not leave it no time.
	var (
		storeRow      Check
		storeReadable bool
		probed        = make(chan struct{})
	)
	if storeErr == nil {
		defer store.Close()
		go func() { defer close(probed); storeRow, storeReadable = storeCheck(ctx, cfg, store) }()
	} else {
		close(probed)
	}
	pf, kafkaErr := w.Preflight(ctx, opts.BrokerWait)
	<-probed
	switch {
	case kafkaErr != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		kafkaErr = fmt.Errorf("%w (the check's time bound ended the retries; run retries for %s)", kafkaErr, brokercheck.StartupBound)
	case kafkaErr != nil && opts.BrokerWait > 0 && opts.BrokerWait < brokercheck.StartupBound && !errors.As(kafkaErr, new(*brokercheck.Error)):
		kafkaErr = fmt.Errorf("%w (check waits %s for brokers that do not answer, --broker-wait; run waits %s)", kafkaErr, opts.BrokerWait, brokercheck.StartupBound)
	}
	kafka(r, cfg, pf, kafkaErr)
	memoryPlan(r, cfg, pf, opts)
	switch {
	case storeErr != nil:
		r.add(Check{Name: "checkpoint store", Status: Fail, Detail: checkpoint.Explain(cfg.CheckpointURL, storeErr).Error(),
			Fix: "give --checkpoint-url a location bloomgate can open (s3://bucket/prefix, file:///dir, mem://name)"})
		r.add(Check{Name: "checkpoints", Status: Skip, Detail: "the store cannot be opened"})
	case storeReadable:
		r.add(storeRow)
		checkpoints(ctx, r, cfg, store, state, pf)
	default:
		r.add(storeRow)
		r.add(Check{Name: "checkpoints", Status: Skip, Detail: "the store does not answer"})
	}
	if cfg.Exact {
		exactDir(r, cfg, pf, opts)
	}
	return r, nil
}

// Timeout is the default bound of a check: the brokers' start-up bound,
// as run waits for them.
const Timeout = brokercheck.StartupBound + 10*time.Second
