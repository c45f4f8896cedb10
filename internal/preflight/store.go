package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/memory"
	"github.com/bloomgate/bloomgate/internal/quantity"
	"github.com/bloomgate/bloomgate/internal/worker"
)

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
// with the settings: a key defined otherwise or another filter kind is
// refused by the restore (memory.Store.Compatible), a changed filter plan
// is carried over.
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
		found, corrupt int
		seqs           []string
		incompatible   *memory.IncompatibleError
		changes        = map[string][]int{}
		changeOrder    []string
		isolation      []int
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
		var ie *memory.IncompatibleError
		if errors.As(state.Compatible(m), &ie) {
			if incompatible == nil {
				incompatible = ie
			} else {
				incompatible.Partitions = append(incompatible.Partitions, p)
			}
			continue
		}
		for _, ch := range planChanges(m.Filter, cfg, pf.Partitions) {
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
	if incompatible != nil {
		// The words of run's refusal (memory.IncompatibleError).
		c.Status = Fail
		c.Detail += "; " + incompatible.Finding()
		if cfg.OnRestoreFailure == config.OnRestoreEmpty {
			c.Status = Warn
			c.Detail += "; --on-restore-failure empty starts them empty, forgetting their window"
		} else {
			c.Detail += "; run refuses them (--on-restore-failure fail)"
		}
		c.Fix = incompatible.Fix()
	}
	for _, ch := range changeOrder {
		c.Detail += fmt.Sprintf("; partitions %s: %s", worker.PartitionList(changes[ch]), ch)
	}
	if len(changeOrder) > 0 && c.Status == OK {
		// Not refused, but a plan change is seldom an accident to keep.
		c.Status = Warn
		c.Fix = "if the filter plan is meant to change, nothing to do: run carries the checkpointed generations over " +
			"(docs/checkpoints.md, \"Settings recorded in the manifest\"); else restore the checkpointed settings"
	}
	if len(isolation) > 0 {
		if c.Status == OK {
			c.Status = Warn
		}
		c.Detail += fmt.Sprintf("; partitions %s were built at another --isolation-level than %s", worker.PartitionList(isolation), cfg.IsolationLevel)
	}
	r.add(c)
}

// planChanges lists what changed in the filter plan since a checkpoint;
// all of it is carried over (docs/checkpoints.md, "Settings recorded in the manifest").
func planChanges(f checkpoint.FilterParams, cfg *config.Run, partitions int) []string {
	var out []string
	perPartition := cfg.Capacity
	if partitions > 1 {
		perPartition = (cfg.Capacity + uint64(partitions) - 1) / uint64(partitions)
	}
	if f.Window != cfg.Window {
		out = append(out, fmt.Sprintf("--window %s, checkpointed %s (carried over: sealed generations answer until they leave the new window)",
			quantity.Duration(cfg.Window), quantity.Duration(f.Window)))
	}
	if f.Generations != cfg.Generations {
		out = append(out, fmt.Sprintf("--generations %d, checkpointed %d (carried over)", cfg.Generations, f.Generations))
	}
	if f.Capacity != perPartition {
		out = append(out, fmt.Sprintf("--capacity %s (%s per partition), checkpointed %s per partition (carried over: new generations take the new capacity)",
			quantity.Count(cfg.Capacity), quantity.Count(perPartition), quantity.Count(f.Capacity)))
	}
	if f.FPR != cfg.FPR {
		out = append(out, fmt.Sprintf("--fpr %s, checkpointed %s (carried over: new generations follow the new rate)",
			quantity.Rate(cfg.FPR), quantity.Rate(f.FPR)))
	}
	return out
}
