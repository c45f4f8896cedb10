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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/quantity"
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
}

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
	pf, kafkaErr := w.Preflight(ctx)
	<-probed
	if kafkaErr != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		kafkaErr = fmt.Errorf("%w (the check's time bound ended the retries; run retries for %s)", kafkaErr, brokercheck.StartupBound)
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

// kafka reports the worker's start-up reads.
func kafka(r *Report, cfg *config.Run, pf *worker.Preflight, err error) {
	if err != nil {
		fix := ""
		var refused *brokercheck.Error
		if !errors.As(err, &refused) {
			fix = "check --brokers and that this host reaches them"
		}
		r.add(Check{Name: "brokers", Status: Fail, Detail: err.Error(), Fix: fix})
		r.add(Check{Name: "topics", Status: Skip, Detail: "the brokers did not answer"})
		return
	}
	r.add(Check{Name: "brokers", Status: OK, Detail: "answered (" + strings.Join(cfg.Brokers, ",") + ")"})
	usable := true
	for _, t := range pf.Topics {
		c := Check{Name: "topic", Subject: t.Setting + " " + t.Name, Status: OK, Detail: fmt.Sprintf("%d partitions", t.Partitions)}
		switch {
		case t.Problem != "" && t.Setting == "--input" && cfg.Repartition && t.Partitions == 0:
			c.Detail = "does not exist yet: the --repartition hop creates it at start with --output's partition count"
		case t.Problem != "":
			usable = false
			c.Status, c.Detail = Fail, t.Problem
			if name, hint, ok := strings.Cut(t.Problem, ", e.g. "); ok {
				c.Detail, c.Fix = name, hint
			}
		}
		r.add(c)
	}
	switch {
	case pf.Refused != nil:
		r.add(Check{Name: "partitions", Status: Fail, Detail: strings.TrimPrefix(pf.Refused.Error(), worker.ErrTopicConfig.Error()+": ")})
	case !usable || pf.Partitions == 0:
	case cfg.Partitioning == config.PartitioningSame:
		r.add(Check{Name: "partitions", Status: OK, Detail: fmt.Sprintf("--output has the %d partitions of --input, as --partitioning same needs", pf.Partitions)})
	default:
		r.add(Check{Name: "partitions", Status: OK, Detail: "--partitioning hash takes any partition counts"})
	}
	missing := map[string]bool{}
	for _, t := range pf.Topics {
		missing[t.Name] = t.Problem != "" && t.Partitions == 0
	}
	acls(r, pf.Access, missing)
	for _, l := range pf.Limits {
		r.add(limitCheck(pf, l))
	}
}

// acls reports the ACLs by resource: READ and WRITE on one topic in one
// line.
func acls(r *Report, grants []brokercheck.Grant, missing map[string]bool) {
	type res struct {
		resource brokercheck.Resource
		name     string
	}
	var order []res
	by := map[res][]brokercheck.Grant{}
	for _, g := range grants {
		k := res{g.Need.Resource, g.Need.Name}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], g)
	}
	for _, k := range order {
		gs := by[k]
		c := Check{Name: "acl", Subject: fmt.Sprintf("%s %s", gs[0].Need.Setting, k.name), Status: OK}
		if k.resource == brokercheck.TopicResource && missing[k.name] {
			c.Status, c.Detail = Skip, "the topic does not exist"
			r.add(c)
			continue
		}
		var parts, fixes []string
		for _, g := range gs {
			p := fmt.Sprintf("%s %s", g.Need.Op, g.Verdict)
			if g.How != "" {
				p += " (" + g.How + ")"
			}
			if g.Verdict != brokercheck.Allowed && g.Note != "" {
				p += ": " + g.Note
			}
			parts = append(parts, p)
			switch g.Verdict {
			case brokercheck.Denied:
				c.Status = Fail
				fixes = append(fixes, g.Fix)
			case brokercheck.Unknown:
				if c.Status == OK {
					c.Status = Warn
				}
				fixes = append(fixes, "if missing: "+g.Fix)
			}
		}
		c.Detail = fmt.Sprintf("%s %q: %s", k.resource, k.name, strings.Join(parts, "; "))
		c.Fix = strings.Join(fixes, "; ")
		r.add(c)
	}
}

// limitCheck judges one written topic's max.message.bytes.
func limitCheck(pf *worker.Preflight, l worker.PreflightLimit) Check {
	c := Check{Name: "max.message.bytes", Subject: l.Setting + " " + l.Topic, Status: OK}
	in := "unknown"
	if pf.Input > 0 {
		in = fmt.Sprint(pf.Input)
	}
	if l.Err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cannot be read (%v): the worker assumes --max-batch-bytes %s fits", l.Err, quantity.Size(uint64(pf.MaxBatchBytes)))
		c.Fix = "grant DescribeConfigs on the topic, or keep --max-batch-bytes at most its max.message.bytes less 125 bytes"
		return c
	}
	c.Detail = fmt.Sprintf("%d, --input's %s; records up to %d bytes are written to it", l.MaxMessageBytes, in, l.Bound)
	if l.Fits {
		return c
	}
	larger := fmt.Sprintf("a record over %d bytes, which --input takes, ", l.Bound)
	if pf.Input == 0 {
		larger = fmt.Sprintf("a record over %d bytes (below --max-batch-bytes %s) ", l.Bound, quantity.Size(uint64(pf.MaxBatchBytes)))
	}
	raise := fmt.Sprintf("raise the topic's max.message.bytes to at least %s's (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=N)",
		"the input", l.Topic)
	if pf.Input == 0 {
		raise = fmt.Sprintf("raise the topic's max.message.bytes to at least --max-batch-bytes (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=N)", l.Topic)
	}
	if l.MaxMessageBytes >= pf.Input && pf.Input > 0 {
		raise = fmt.Sprintf("raise --max-batch-bytes to at least %s", quantity.Size(uint64(pf.Input)))
	}
	switch l.Policy {
	case "":
		c.Status = Warn
		c.Detail += "; " + larger + "is dead-lettered as a reference record"
		c.Fix = raise
	case worker.UnwritableStall:
		c.Status = Fail
		c.Detail += "; " + larger + "stalls its partition (--on-unwritable stall)"
		c.Fix = raise + ", or set --dead-letter"
	default:
		c.Status = Warn
		c.Detail += fmt.Sprintf("; %sis unwritable: --on-unwritable %s", larger, l.Policy)
		c.Fix = raise
	}
	return c
}

// memoryHeadroom is what a pod needs besides the filters: the Go
// runtime, fetch and produce buffers, upload parts (docs/deploy.md,
// "Sizing").
const memoryHeadroom = 128 << 20

// memoryPlan reports the planned filter memory.
func memoryPlan(r *Report, cfg *config.Run, pf *worker.Preflight, opts Options) {
	if pf == nil || pf.Partitions == 0 || pf.PlannedBytes == 0 {
		r.add(Check{Name: "memory", Status: Skip, Detail: "the input's partition count is unknown"})
		return
	}
	n := uint64(pf.Partitions)
	per := pf.PlannedBytes
	gen := per / uint64(max(pf.Params.Generations, 1))
	all := n*(per+gen) + memoryHeadroom
	c := Check{Name: "memory", Status: OK, Detail: fmt.Sprintf(
		"filter %s per partition (%s keys per partition and window at fpr %s, %d generations); "+
			"a worker holding all %d partitions needs about %s (filters, one generation each while a checkpoint uploads, %s for the runtime)",
		quantity.Bytes(per), quantity.Count(pf.Params.Capacity), quantity.Rate(pf.Params.FPR), pf.Params.Generations,
		pf.Partitions, quantity.Bytes(all), quantity.Bytes(memoryHeadroom))}
	if limit := opts.MemoryLimit(); limit > 0 {
		c.Detail += fmt.Sprintf("; memory limit %s", quantity.Bytes(limit))
		if all > limit {
			fit := (limit - min(limit, memoryHeadroom)) / (per + gen)
			c.Status = Warn
			c.Detail += fmt.Sprintf(": room for %d of the %d partitions", fit, pf.Partitions)
			c.Fix = fmt.Sprintf("run at least %d workers, raise the memory limit, or lower --capacity or raise --fpr", (n+fit-1)/max(fit, 1))
		}
	}
	r.add(c)
}

// storeCheck runs the create-only probe of the start; readable is false
// if the store does not answer (then reading the checkpoints would only
// wait again) or has no credentials.
func storeCheck(ctx context.Context, cfg *config.Run, store *checkpoint.Store) (_ Check, readable bool) {
	c := Check{Name: "checkpoint store", Status: OK,
		Detail: store.URL() + " answers and honours create-only writes (a probe object under _probe/ was created, refused a second time, and deleted)"}
	err := store.VerifyCreateOnly(ctx)
	switch {
	case err == nil:
	case errors.Is(err, checkpoint.ErrCreateOnlyIgnored) && cfg.CheckpointSkipCreateOnlyCheck:
		c.Status, c.Detail = Warn, err.Error()+" (started anyway: --checkpoint-skip-create-only-check)"
		c.Fix = "only one worker may ever write to this location; a store that honours If-None-Match (AWS S3, MinIO, versitygw, file://) fences stale owners"
	case errors.Is(err, checkpoint.ErrCreateOnlyIgnored):
		c.Status, c.Detail = Fail, err.Error()
		c.Fix = "use a store that honours conditional writes (If-None-Match: * on PutObject), or, if only one worker ever writes here, set --checkpoint-skip-create-only-check"
	default:
		c.Status, c.Detail = Fail, checkpoint.Explain(cfg.CheckpointURL, err).Error()
	}
	// A store that answered but refused the probe may still be read.
	return c, !errors.Is(err, checkpoint.ErrUnavailable) && !errors.Is(err, checkpoint.ErrNoCredentials) && ctx.Err() == nil
}

// checkpoints compares the newest checkpoint of every input partition
// with the settings: a key defined otherwise is refused by the restore
// (memory.Store.Compatible), a changed filter plan is carried over.
func checkpoints(ctx context.Context, r *Report, cfg *config.Run, store *checkpoint.Store, state *memory.Store, pf *worker.Preflight) {
	topic := cfg.Input
	if cfg.Repartition {
		topic = cfg.RepartitionTopic()
	}
	c := Check{Name: "checkpoints", Subject: cfg.Group + "/" + topic, Status: OK}
	if pf == nil || pf.Partitions == 0 {
		c.Status, c.Detail = Skip, "the input's partition count is unknown"
		r.add(c)
		return
	}
	var (
		found, corrupt    int
		seqs              []string
		incompatible      []int
		firstIncompatible *checkpoint.KeyIdentity
		changes           = map[string][]int{}
		changeOrder       []string
		isolation         []int
	)
	for p := range pf.Partitions {
		m, skipped, err := store.Partition(cfg.Group, topic, p).Newest(ctx)
		corrupt += skipped
		switch {
		case errors.Is(err, checkpoint.ErrNoCheckpoint):
			continue
		case err != nil:
			c.Status, c.Detail = Fail, checkpoint.Explain(cfg.CheckpointURL, err).Error()
			r.add(c)
			return
		}
		found++
		seqs = append(seqs, fmt.Sprintf("%d:%d", p, m.Seq))
		if state.Compatible(m) != nil {
			incompatible = append(incompatible, p)
			if firstIncompatible == nil {
				firstIncompatible = m.Key
			}
			continue
		}
		for _, ch := range planChanges(m.Filter, cfg) {
			if _, ok := changes[ch]; !ok {
				changeOrder = append(changeOrder, ch)
			}
			changes[ch] = append(changes[ch], p)
		}
		if m.Isolation != "" && m.Isolation != cfg.IsolationLevel {
			isolation = append(isolation, p)
		}
	}
	if found == 0 {
		c.Detail = fmt.Sprintf("none yet: each of the %d partitions starts a new memory", pf.Partitions)
		if cfg.StartFrom != "earliest" || cfg.SeedFrom != "" {
			c.Detail += fmt.Sprintf(" (--start-from %s", cfg.StartFrom)
			if cfg.SeedFrom != "" {
				c.Detail += ", --seed-from " + cfg.SeedFrom
			}
			c.Detail += ")"
		}
		r.add(c)
		return
	}
	c.Detail = fmt.Sprintf("%d of %d partitions checkpointed (partition:sequence %s)", found, pf.Partitions, strings.Join(seqs, " "))
	if corrupt > 0 {
		c.Status = Warn
		c.Detail += fmt.Sprintf("; %d newer manifests do not verify and are passed over", corrupt)
		c.Fix = "see bloomgate inspect " + store.URL()
	}
	if len(incompatible) > 0 {
		c.Status = Fail
		own := cfg.KeyIdentity()
		c.Detail += fmt.Sprintf("; partitions %s were written with %s, these settings make %s: the stored keys match none of the new ones",
			partitionList(incompatible), firstIncompatible, &own)
		if cfg.OnRestoreFailure == config.OnRestoreEmpty {
			c.Status = Warn
			c.Detail += "; --on-restore-failure empty starts them empty, forgetting their window"
		} else {
			c.Detail += "; run refuses them (--on-restore-failure fail)"
		}
		c.Fix = "keep the key settings the checkpoints were written with (--key, --normalize), or start a new memory: a new --group, " +
			"or --on-restore-failure empty once (rebuilt from the retained input)"
	}
	for _, ch := range changeOrder {
		c.Detail += fmt.Sprintf("; partitions %s: %s", partitionList(changes[ch]), ch)
	}
	if len(isolation) > 0 {
		if c.Status == OK {
			c.Status = Warn
		}
		c.Detail += fmt.Sprintf("; partitions %s were built at another --isolation-level than %s", partitionList(isolation), cfg.IsolationLevel)
	}
	r.add(c)
}

// planChanges lists what changed in the filter plan since a checkpoint;
// all of it is carried over (docs/checkpoints.md, "Settings evolution").
func planChanges(f checkpoint.FilterParams, cfg *config.Run) []string {
	var out []string
	if f.Window != cfg.Window {
		out = append(out, fmt.Sprintf("--window %s, checkpointed %s (carried over: sealed generations answer until they leave the new window)",
			quantity.Duration(cfg.Window), quantity.Duration(f.Window)))
	}
	if f.Generations != cfg.Generations {
		out = append(out, fmt.Sprintf("--generations %d, checkpointed %d (carried over)", cfg.Generations, f.Generations))
	}
	if f.FPR != cfg.FPR {
		out = append(out, fmt.Sprintf("--fpr %s, checkpointed %s (carried over: new generations follow the new rate)",
			quantity.Rate(cfg.FPR), quantity.Rate(f.FPR)))
	}
	return out
}

// partitionList writes partition numbers as ranges: 0-3,5.
func partitionList(ps []int) string {
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(",")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[j])
		} else {
			fmt.Fprintf(&b, "%d", ps[i])
		}
		i = j + 1
	}
	return b.String()
}

// exactKeyBytes is what one key costs exact mode on disk (internal/exact:
// 16 bytes per key in the run files, plus 28 per file).
const exactKeyBytes = 16

// ExactStoreBytes is the disk one partition's exact store needs at its
// plan: the keys of its G generations (capacity per partition ×
// G/(G−1)) at 16 bytes each, and one generation more while merges and
// checkpoint links keep replaced files.
func ExactStoreBytes(capacityPerPartition uint64, generations int) uint64 {
	g := uint64(max(generations, 2))
	return exactKeyBytes * capacityPerPartition * (g + 1) / (g - 1)
}

// exactDir checks that --exact-dir is writable, with room for the stores
// of the planned keys: a partition's store holds the keys of its G
// generations (capacity per partition × G/(G−1)) and needs one generation
// more while merges and checkpoint links keep replaced files.
func exactDir(r *Report, cfg *config.Run, pf *worker.Preflight, opts Options) {
	c := Check{Name: "exact-dir", Status: OK}
	dir, err := writableDir(cfg.ExactDir)
	if err != nil {
		c.Status, c.Detail = Fail, err.Error()
		c.Fix = "give --exact-dir a writable directory (in a container: a writable volume, e.g. an emptyDir sized for the plan; see docs/deploy.md, \"Exact mode\")"
		r.add(c)
		return
	}
	c.Detail = cfg.ExactDir + " is writable"
	if pf == nil || pf.Partitions == 0 || pf.Params.Generations < 2 {
		r.add(c)
		return
	}
	per := ExactStoreBytes(pf.Params.Capacity, pf.Params.Generations)
	all := per * uint64(pf.Partitions)
	free, err := opts.FreeBytes(dir)
	if err != nil {
		c.Status, c.Detail = Warn, fmt.Sprintf("%s is writable; free space unknown (%v)", cfg.ExactDir, err)
		r.add(c)
		return
	}
	c.Detail = fmt.Sprintf("%s is writable; %s free; the plan needs about %s per partition (16 B per key of %d generations, one more for merges), %s for all %d",
		cfg.ExactDir, quantity.Bytes(free), quantity.Bytes(per), pf.Params.Generations, quantity.Bytes(all), pf.Partitions)
	switch {
	case free < per:
		c.Status = Fail
		c.Fix = "give --exact-dir a larger volume, or lower --capacity"
	case free < all:
		c.Status = Warn
		c.Detail += fmt.Sprintf(": room for %d partitions", free/per)
		c.Fix = fmt.Sprintf("with fewer than %d workers sharing the partitions, give --exact-dir a larger volume", (all+free-1)/free)
	}
	r.add(c)
}

// writableDir returns the directory that would hold dir's files: dir, or
// its nearest existing ancestor (run creates the rest), after creating and
// removing a file in it.
func writableDir(dir string) (string, error) {
	d := filepath.Clean(dir)
	for {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return "", fmt.Errorf("--exact-dir %s: %s is not a directory", dir, d)
			}
			break
		}
		parent := filepath.Dir(d)
		if !errors.Is(err, os.ErrNotExist) || parent == d {
			return "", fmt.Errorf("--exact-dir %s: %w", dir, err)
		}
		d = parent
	}
	f, err := os.CreateTemp(d, ".bloomgate-check-*")
	if err != nil {
		return "", fmt.Errorf("--exact-dir %s: cannot create files in %s: %w", dir, d, unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return d, nil
}

// unwrapPath drops the path a *PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Timeout is the default bound of a check: the brokers' start-up bound,
// as run waits for them.
const Timeout = brokercheck.StartupBound + 10*time.Second
