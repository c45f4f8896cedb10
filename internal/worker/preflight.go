package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/producer"
)

// Preflight is what the worker's start finds on the Kafka side, read by
// Worker.Preflight without joining the group or touching a partition
// (`bloomgate check`).
type Preflight struct {
	// Topics are the topics the worker reads and writes, in the order of
	// their settings (input, output, duplicates, dead-letter, seed topic).
	Topics []PreflightTopic
	// Refused is what Run's start refuses once every topic exists:
	// partition counts that --partitioning same or the seed topic cannot
	// work with, a filter plan the input's partitions cannot hold. nil:
	// nothing, or a topic is missing (Topics says which).
	Refused error
	// Access is the verdict on every ACL the worker needs.
	Access []brokercheck.Grant
	// Input is the input's max.message.bytes (0: unknown, InputErr says
	// why), against which Limits are judged.
	Input    int64
	InputErr error
	// Limits are the written topics' max.message.bytes and the bound of
	// a record the worker writes to each.
	Limits []PreflightLimit
	// MaxBatchBytes is Config.MaxBatchBytes.
	MaxBatchBytes int64
	// Partitions is the input's partition count (0: unknown); Params the
	// plan of one partition's filter, and PlannedBytes its memory at that
	// plan (0: the state store does not plan). With
	// Config.InputMadeLikeOutput and no input yet, Partitions is the
	// output's count and InputPlanned is set.
	Partitions   int
	InputPlanned bool
	Params       FilterParams
	PlannedBytes uint64
}

// PreflightTopic is one topic the worker reads or writes.
type PreflightTopic struct {
	Setting    string // the flag that names it, e.g. "--input"
	Name       string
	Partitions int
	// Problem says why the worker cannot use the topic, with the fix (""
	// when it can): the start-up error's wording.
	Problem string
}

// PreflightLimit is one written topic's limit.
type PreflightLimit struct {
	Setting string
	Topic   string
	// MaxMessageBytes is the topic's max.message.bytes (0: unknown, Err
	// says why).
	MaxMessageBytes int64
	Err             error
	// Bound is the largest batch (framing included, as the broker sizes
	// it) the worker writes to the topic; a record whose batch alone is
	// larger is unwritable.
	Bound int64
	// Fits: the topic takes every batch the input takes (its
	// max.message.bytes is at least the input's, and --max-batch-bytes
	// does not lower the bound below it), or, with the input's limit
	// unknown, batches of --max-batch-bytes. Within fitsMargin: the
	// defaults (--max-batch-bytes 1 MiB, Kafka's max.message.bytes 1 MiB
	// + 12 bytes) fit. A record within that margin and the headers the
	// worker adds of the input's limit can still be unwritable, and is
	// placed by Policy.
	Fits bool
	// Policy is what happens to an unwritable record (OnUnwritable); for
	// the dead-letter topic a reference record takes its place.
	Policy UnwritablePolicy
}

// Preflight reads what Run reads before it joins the group: the topics
// with their partition counts, the ACLs the worker needs (decided without
// changing anything: brokercheck.Access), the written topics'
// max.message.bytes against the input's, and the filter plan per
// partition. It writes nothing to Kafka, and a Worker that ran Preflight
// cannot Run.
//
// The error is what stops Run's start before any topic is looked at:
// brokers that do not answer within ctx or retryFor (0: as Run waits,
// brokercheck.StartupBound), a refused login, a TLS mismatch.
func (w *Worker) Preflight(ctx context.Context, retryFor time.Duration) (*Preflight, error) {
	if !w.running.CompareAndSwap(false, true) {
		return nil, errors.New("worker: Preflight after Run or Preflight")
	}
	w.client = &kafka.Client{Addr: kafka.TCP(w.cfg.Brokers...), Transport: w.cfg.Transport, Timeout: 30 * time.Second}
	w.check = w.brokerCheck()
	w.check.Bound = retryFor

	topics := w.preflightTopics()
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.name)
	}
	md, err := w.readMetadata(ctx, names)
	if err != nil {
		return nil, err
	}
	found := map[string]brokercheck.Topic{}
	for _, t := range md {
		found[t.Name] = t
	}
	r := &Preflight{MaxBatchBytes: w.cfg.MaxBatchBytes}
	if in := found[w.cfg.Input]; in.Err == nil {
		r.Partitions = in.Partitions
	}
	usable := true
	for _, t := range topics {
		pt := w.preflightTopic(t, found, r.Partitions)
		usable = usable && pt.Problem == ""
		r.Topics = append(r.Topics, pt)
	}

	if r.Access, err = w.check.Access(ctx, md); err != nil {
		return nil, fmt.Errorf("checking ACLs: %w", err)
	}

	if usable {
		if r.Refused, err = w.preflightStart(ctx); err != nil {
			return nil, err
		}
	}
	if out := found[w.cfg.Output]; r.Partitions == 0 && w.cfg.InputMadeLikeOutput && out.Err == nil && out.Partitions > 0 {
		r.Partitions, r.InputPlanned = out.Partitions, true
	}
	if r.Partitions > 0 {
		r.Params = w.cfg.partitionParams(r.Partitions)
		if pl, ok := w.deps.State.(Planner); ok && pl.CheckParams(r.Params) == nil {
			r.PlannedBytes = pl.PlannedBytes(r.Params)
		}
	}
	if found[w.cfg.Input].Err == nil && found[w.cfg.Output].Err == nil {
		w.preflightLimits(ctx, r, found)
	}
	return r, nil
}

// namedTopic is a topic a setting names.
type namedTopic struct{ setting, name string }

// preflightTopics are the topics the settings name.
func (w *Worker) preflightTopics() []namedTopic {
	topics := []namedTopic{{"--input", w.cfg.Input}, {"--output", w.cfg.Output}}
	for _, t := range []namedTopic{{"--duplicates", w.cfg.Duplicates}, {"--dead-letter", w.cfg.DeadLetter}, {"--seed-topic", w.cfg.SeedTopic}} {
		if t.name != "" {
			topics = append(topics, t)
		}
	}
	return topics
}

// preflightTopic is topic t as the metadata found it, with its problem if
// it cannot be used; inputPartitions words a missing topic's fix.
func (w *Worker) preflightTopic(t namedTopic, found map[string]brokercheck.Topic, inputPartitions int) PreflightTopic {
	ft, ok := found[t.name]
	pt := PreflightTopic{Setting: t.setting, Name: t.name, Partitions: ft.Partitions}
	switch {
	case ok && ft.Err == nil && ft.Partitions > 0:
	case !ok, ft.Err == nil, errors.Is(ft.Err, kafka.UnknownTopicOrPartition):
		pt.Problem = w.missingTopic(t.setting[2:], t.name, inputPartitions)
		if t.setting == "--seed-topic" {
			pt.Problem = fmt.Sprintf("--seed-topic topic %q does not exist: name an existing topic, or drop --seed-topic", t.name)
		}
	case errors.Is(ft.Err, kafka.TopicAuthorizationFailed):
		pt.Problem = fmt.Sprintf("%s topic %q: the principal may not DESCRIBE it (see the ACLs)", t.setting, t.name)
	default:
		pt.Problem = fmt.Sprintf("%s topic %q: %v", t.setting, t.name, ft.Err)
	}
	return pt
}

// preflightStart runs Run's own start check on the counts and the plan;
// its ACL part is reported by Preflight per ACL, so it is left out here.
// refused is what would stop Run; err what stops Preflight.
func (w *Worker) preflightStart(ctx context.Context) (refused, err error) {
	saved := *w.check
	w.check.Needs = nil
	err = w.checkTopics(ctx)
	if err == nil {
		err = w.checkSeedTopic(ctx)
	}
	*w.check = saved
	var be *brokercheck.Error
	if err != nil && !errors.Is(err, ErrTopicConfig) && !errors.As(err, &be) {
		return nil, err
	}
	return err, nil
}

// preflightLimits judges the written topics' max.message.bytes as the
// worker bounds its batches at start (outputLimits), against the input's.
// fitsMargin is how far below the input's max.message.bytes a written
// topic's bound may be and still count as taking what the input takes:
// a batch's framing and a little slack.
const fitsMargin = producer.BatchOverhead + 64

func (w *Worker) preflightLimits(ctx context.Context, r *Preflight, found map[string]brokercheck.Topic) {
	written := w.writtenTopics()
	got, errs := w.maxMessageBytes(ctx, append([]string{w.cfg.Input}, written...))
	r.Input, r.InputErr = got[w.cfg.Input], errs[w.cfg.Input]
	l := &outputLimits{maxBatchBytes: w.cfg.MaxBatchBytes}
	var vals [3]int64
	for _, t := range written {
		k := w.kindOf(t)
		l.topics[k], vals[k] = t, got[t]
	}
	l.cur.Store(&vals)
	for _, t := range written {
		if found[t].Err != nil {
			continue
		}
		k := w.kindOf(t)
		pl := PreflightLimit{Setting: "--" + kindFlag(k), Topic: t, MaxMessageBytes: got[t], Err: errs[t], Bound: l.bound(t), Policy: w.cfg.OnUnwritable}
		switch {
		case pl.MaxMessageBytes == 0:
			pl.Fits = pl.Bound >= r.Input-fitsMargin
		case r.Input > 0:
			pl.Fits = pl.MaxMessageBytes >= r.Input && pl.Bound >= r.Input-fitsMargin
		default:
			pl.Fits = pl.MaxMessageBytes >= w.cfg.MaxBatchBytes
		}
		if k == toDeadLetter {
			pl.Policy = ""
		}
		r.Limits = append(r.Limits, pl)
	}
}

// kindFlag is the flag that names a written topic.
func kindFlag(k writtenKind) string {
	switch k {
	case toDuplicates:
		return "duplicates"
	case toDeadLetter:
		return "dead-letter"
	}
	return "output"
}
