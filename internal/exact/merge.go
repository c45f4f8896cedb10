package exact

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// mergeFanout: the newest generation's runs are merged four at a time
// within a size class (classes grow by this factor), so a hash is
// rewritten about log₄(generation size / FlushKeys) times while its
// generation is the newest, and a generation has at most
// (mergeFanout−1) runs per class.
const mergeFanout = 4

// mergeJob merges runs of one generation into one new run.
type mergeJob struct {
	gen  uint64
	in   []*run
	name string
}

// mergeLoop runs merges until ctx ends: generations that no longer
// receive adds (newestLocked) are sealed into one run each (it then stays as it is until the
// generation is dropped, so checkpoints upload it once), and the newest
// generation's runs are merged by size class.
func (s *Store) mergeLoop(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for ctx.Err() == nil {
			job := s.pickMerge()
			if job == nil {
				break
			}
			if err := s.merge(ctx, job); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("exact store: merge failed; retried on the next flush", "generation", job.gen, "err", err)
				}
				break
			}
		}
	}
}

// pickMerge chooses the next merge and takes references on its inputs.
func (s *Store) pickMerge() *mergeJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.merging || len(s.live) == 0 {
		return nil
	}
	var in []*run
	var gen uint64
	newest := s.newestLocked()
	for _, g := range s.live {
		if g != newest && len(s.runs[g]) > 1 {
			gen, in = g, slices.Clone(s.runs[g])
			break
		}
	}
	if in == nil {
		gen, in = newest, pickClass(s.runs[newest], s.opts.FlushKeys)
	}
	if in == nil {
		return nil
	}
	for _, r := range in {
		r.refs.Add(1)
	}
	job := &mergeJob{gen: gen, in: in, name: runName(gen, s.nextSeq)}
	s.nextSeq++
	s.merging = true
	return job
}

// newestLocked is the generation that receives adds: the one of the
// newest add while it is live, else the highest. After a plan change and
// back the caller may add to a generation below a legacy one; treating
// the highest as the newest would seal the receiving generation again
// after every flush (a rewrite of the whole generation each time).
func (s *Store) newestLocked() uint64 {
	if s.adding >= s.floor {
		if _, ok := slices.BinarySearch(s.live, s.adding); ok {
			return s.adding
		}
	}
	return s.live[len(s.live)-1]
}

// mergeAll runs merges until there is nothing to merge (the background
// merger may run some of them). For tests and benchmarks that need a
// settled store.
func (s *Store) mergeAll(ctx context.Context) error {
	for ctx.Err() == nil {
		job := s.pickMerge()
		if job != nil {
			if err := s.merge(ctx, job); err != nil {
				return err
			}
			continue
		}
		s.mu.Lock()
		busy := s.merging
		s.mu.Unlock()
		if !busy {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return ctx.Err()
}

// pickClass returns mergeFanout runs of one size class (the smallest such
// class), or nil. rs is sorted by size. Class 0 holds runs below
// 2·flushKeys (a flush writes at most flushKeys), class c+1 is mergeFanout
// times larger: the merge of mergeFanout runs of a class lands in the
// next one even when some hashes were in two of them.
func pickClass(rs []*run, flushKeys int) []*run {
	class := func(n int) int {
		c := 0
		for limit := 2 * flushKeys; n >= limit; limit *= mergeFanout {
			c++
		}
		return c
	}
	for i := 0; i+mergeFanout <= len(rs); i++ {
		if class(rs[i].n) == class(rs[i+mergeFanout-1].n) {
			return slices.Clone(rs[i : i+mergeFanout])
		}
	}
	return nil
}

// merge writes the job's output (outside mu: lookups and adds go on) and
// swaps it in for its inputs, unless the generation was dropped meanwhile.
func (s *Store) merge(ctx context.Context, job *mergeJob) (err error) {
	defer func() {
		s.mu.Lock()
		s.merging = false
		s.mu.Unlock()
		for _, r := range job.in {
			_ = r.release()
		}
	}()
	start := time.Now()
	path := filepath.Join(s.dir, job.name)
	size, err := mergeRuns(ctx, path, job.gen, job.in)
	if err != nil {
		_ = os.Remove(path)
		return err
	}
	out, err := openRun(path, job.name)
	if err != nil {
		_ = os.Remove(path)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.runs[job.gen]
	if job.gen < s.floor || slices.ContainsFunc(job.in, func(r *run) bool { return !slices.Contains(cur, r) }) {
		out.removed.Store(true)
		return errors.Join(out.release())
	}
	s.m.written.Add(float64(size))
	s.removeRuns(job.gen, job.in)
	s.addRun(out)
	s.log.Debug("exact store: merged runs", "generation", job.gen, "runs", len(job.in), "keys", out.n, "took", time.Since(start))
	return nil
}
