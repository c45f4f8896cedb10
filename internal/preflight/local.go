package preflight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/quantity"
	"github.com/bloomgate/bloomgate/internal/worker"
)

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
	if pf.InputPlanned {
		c.Detail += fmt.Sprintf(" (the %d partitions the --repartition hop's topic gets, as --output has)", pf.Partitions)
	}
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
