package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/internal/errmark"
)

// --on-restore-failure empty is an escape hatch: it lets a memory that
// cannot be restored (every checkpoint corrupt, or written with another
// key or filter kind) start empty and be rebuilt from the retained input,
// once. Left in place it would discard a memory at any later restore
// failure instead of stopping the worker, so the worker says so: one WARN
// at start when it is set, and one ERROR per round of restores that
// discarded memories, naming the partitions and asking to remove it.
// Every discard is counted in bloomgate_checkpoint_restores_discarded_total.

// memoryCheckTimeout bounds the start's look at the checkpoints
// (manifests only); a store slower than that is left to the restores,
// which retry and report it.
const memoryCheckTimeout = 30 * time.Second

// checkMemory asks the state store, before the group is joined, whether
// the settings can restore the input's checkpoints (MemoryChecker). With
// --on-restore-failure fail a refusal ends Run with the store's error,
// one for all partitions; with empty the partitions it names start empty
// (reported as they do), and a start that needs nothing of the setting is
// told to remove it.
func (w *Worker) checkMemory(ctx context.Context) error {
	var refused error
	checked := false
	if mc, ok := w.deps.State.(MemoryChecker); ok {
		cctx, cancel := context.WithTimeout(ctx, memoryCheckTimeout)
		err := mc.CheckMemory(cctx, w.cfg.Input, w.partitions[w.cfg.Input])
		cancel()
		switch {
		case errors.Is(err, ErrIncompatible):
			refused, checked = err, true
		case err != nil:
			w.log.Debug("the checkpoints could not be checked at start; the restores will tell", "err", err)
		default:
			checked = true
		}
	}
	if w.cfg.OnRestoreFailure != RestoreEmpty {
		if refused != nil {
			return errmark.Mark(refused, errWorkerStopped)
		}
		return nil
	}
	switch {
	case refused != nil:
		w.log.Info("--on-restore-failure empty: the partitions these settings cannot restore start empty as they are assigned",
			"refused", refused)
	case checked:
		w.log.Warn("--on-restore-failure empty is set, and no checkpoint needs it now: every checkpoint found fits these settings. " +
			"Left in place, a partition whose checkpoints do not load (corrupt, or written with other --key/--normalize/--url-rules/--filter) " +
			"starts empty and forgets its window instead of stopping the worker; remove the setting once the rebuild it was set for is done")
	default:
		w.log.Warn("--on-restore-failure empty is set: a partition whose checkpoints do not load (corrupt, or written with other " +
			"--key/--normalize/--url-rules/--filter) starts empty and forgets its window instead of stopping the worker; remove the setting " +
			"once the rebuild it was set for is done")
	}
	return nil
}

// discardLog gathers the partitions --on-restore-failure empty started
// empty, for one line per round of restores (those running at the same
// time) instead of one per partition.
type discardLog struct {
	mu        sync.Mutex
	restoring int   // partitions inside restore now
	pending   []int // started empty since the last line
	reason    error // the first pending one's
	total     int   // started empty since start
}

// enter and leave bracket a partition's restore; leave reports the
// pending discards once no restore runs.
func (d *discardLog) enter() {
	d.mu.Lock()
	d.restoring++
	d.mu.Unlock()
}

func (d *discardLog) leave(w *Worker) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.restoring--
	if d.restoring > 0 || len(d.pending) == 0 {
		return
	}
	slices.Sort(d.pending)
	n := len(d.pending)
	noun := "partitions"
	if n == 1 {
		noun = "partition"
	}
	w.log.Error(fmt.Sprintf("--on-restore-failure empty: %d %s started empty (%s): their checkpoints exist but none loads, so their memory "+
		"is rebuilt from the retained input and keys older than it are forgotten. Remove --on-restore-failure empty now: left in place, "+
		"it discards a memory at any later restore failure instead of stopping the worker", n, noun, PartitionList(d.pending)),
		"started_empty", n, "started_empty_since_start", d.total, "reason", d.reason)
	d.pending, d.reason = nil, nil
}

// discarded counts partition p, whose restore failed with err, as
// started empty.
func (d *discardLog) discarded(w *Worker, p int, err error) {
	w.m.restoresDiscarded.WithLabelValues(w.cfg.Input).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending = append(d.pending, p)
	d.total++
	if d.reason == nil {
		d.reason = err
	}
}

// PartitionList writes ascending partition numbers as messages name
// them, in ranges: 0-3,5.
func PartitionList(ps []int) string {
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
