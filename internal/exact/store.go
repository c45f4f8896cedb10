package exact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Errors callers branch on.
var (
	// ErrClosed is returned by every method of a closed Store.
	ErrClosed = errors.New("exact store: closed")
	// ErrDropped: Add for a generation below the floor set by DropBefore.
	// The filter never adds to a dropped generation; getting it means the
	// caller's generations and the store's disagree.
	ErrDropped = errors.New("exact store: generation already dropped")
)

// Store is a set of (generation, hash) pairs on local disk. See the package
// documentation for what it guarantees and what it costs.
//
// All methods are safe for concurrent use. A failed write (Add, AddBatch,
// Checkpoint) leaves the store unusable: every later call returns the same
// error, and the caller restores from its last checkpoint.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	m    *metrics
	lock io.Closer

	// life is held shared by every operation and exclusively by Close.
	life   sync.RWMutex
	closed bool

	// mu guards everything below, and the runs' mappings: a run is
	// unmapped only after it left gens, under mu, and no lookup can be
	// inside it then.
	mu      sync.Mutex
	pending *pending          // adds not yet in a run
	live    []uint64          // generations that may hold keys, ascending, all ≥ floor
	runs    map[uint64][]*run // each generation's runs, smallest first
	floor   uint64            // generations below it are dropped
	nextSeq uint64            // numbers the next run file
	disk    int64             // bytes of the runs
	err     error             // sticky write failure
	merging bool              // a merge is running (outside mu)
	adding  uint64            // the generation of the newest add (0: none yet)

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	cpMu   sync.Mutex      // one cut at a time
	cpSeq  uint64          // names checkpoint directories
	sumsMu sync.Mutex      // one describe at a time
	sums   map[string]File // digests of run files already described (immutable)
}

// Open opens the store in dir, creating an empty one when dir does not
// exist or is empty. A directory without a manifest (not a store, or a
// store that was not closed: its state is unknown) is refused: Restore it
// from a checkpoint instead.
//
// Open starts one goroutine (merges); Close stops it and waits.
func Open(dir string, opts Options) (*Store, error) {
	return openStore(dir, opts, nil, false)
}

// Create opens an empty store in dir, removing whatever dir held; it is
// refused, and nothing removed, while another store holds dir (its lock
// is taken before anything is removed).
func Create(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating exact store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("creating exact store: %w", err)
	}
	ents, err := os.ReadDir(dir)
	for _, e := range ents {
		if err != nil {
			break
		}
		if e.Name() != lockFile {
			err = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	if uerr := lock.Close(); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return nil, fmt.Errorf("creating exact store: clearing %s: %w", dir, err)
	}
	return openStore(dir, opts, nil, false)
}

// openStore opens dir; known seeds the digest cache (from Restore), and
// mustExist refuses to create a store.
func openStore(dir string, opts Options, known map[string]File, mustExist bool) (_ *Store, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening exact store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("opening exact store: %w", err)
	}
	s := &Store{
		dir: dir, opts: opts, log: opts.Logger, lock: lock,
		pending: newPending(0),
		runs:    make(map[uint64][]*run),
		nextSeq: 1,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		sums:    known,
	}
	defer func() {
		if err != nil {
			s.releaseRuns()
			lock.Close()
		}
	}()
	if s.sums == nil {
		s.sums = make(map[string]File)
	}
	// Checkpoint directories of an earlier process: their uploads are over
	// or abandoned.
	if err := os.RemoveAll(filepath.Join(dir, snapshotsDir)); err != nil {
		return nil, fmt.Errorf("opening exact store: removing old checkpoint directories: %w", err)
	}
	if err := s.load(mustExist); err != nil {
		return nil, fmt.Errorf("opening exact store in %s: %w", dir, err)
	}
	if s.m, err = newMetrics(opts.Registerer, s); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.mergeLoop(ctx)
	s.signal()
	return s, nil
}

// load reads the manifest and maps its runs, or starts an empty store.
// Files the manifest does not name (merge outputs of a process that died,
// temporary files) are removed. The manifest itself is removed until
// Close writes it again: a store that is not closed cleanly cannot be
// reopened, only restored.
func (s *Store) load(mustExist bool) error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	populated := slices.ContainsFunc(ents, func(e fs.DirEntry) bool { return e.Name() != lockFile })
	m, err := readManifest(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !populated && !mustExist:
		return nil // a new store
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: no manifest: not a store, or a store that was not closed (restore it from a checkpoint)", errMalformed)
	case err != nil:
		return err
	}
	s.floor, s.nextSeq = m.Floor, max(m.NextSeq, 1)
	keep := map[string]bool{lockFile: true}
	for _, rec := range m.Runs {
		r, err := openRun(filepath.Join(s.dir, rec.Name), rec.Name)
		if err != nil {
			return err
		}
		if r.gen != rec.Gen || r.n != rec.Keys {
			r.release()
			return fmt.Errorf("%w: run %s holds %d keys of generation %d, manifest says %d of %d", errMalformed, rec.Name, r.n, r.gen, rec.Keys, rec.Gen)
		}
		s.addRun(r)
		keep[rec.Name] = true
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRun makes r one of its generation's runs (mu held, or not yet shared).
func (s *Store) addRun(r *run) {
	rs := s.runs[r.gen]
	i, _ := slices.BinarySearchFunc(rs, r.n, func(x *run, n int) int { return x.n - n })
	s.runs[r.gen] = slices.Insert(rs, i, r)
	if j, found := slices.BinarySearch(s.live, r.gen); !found {
		s.live = slices.Insert(s.live, j, r.gen)
	}
	s.disk += r.size
}

// removeRuns takes rs out of the store; each file goes when its last
// reader (a merge) lets go of it.
func (s *Store) removeRuns(gen uint64, rs []*run) {
	s.runs[gen] = slices.DeleteFunc(s.runs[gen], func(r *run) bool { return slices.Contains(rs, r) })
	if len(s.runs[gen]) == 0 {
		delete(s.runs, gen)
	}
	for _, r := range rs {
		s.disk -= r.size
		r.removed.Store(true)
		if err := r.release(); err != nil {
			s.log.Warn("exact store: removing a run", "run", r.name, "err", err)
		}
	}
}

// releaseRuns unmaps every run, keeping the files (Close, failed Open).
func (s *Store) releaseRuns() {
	for g, rs := range s.runs {
		for _, r := range rs {
			_ = r.release()
		}
		delete(s.runs, g)
	}
}

func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Add records h in generation gen. It is visible to Has and Contains when
// Add returns, and part of every checkpoint taken after that.
func (s *Store) Add(gen uint64, h Hash) error {
	return s.AddBatch(gen, []Hash{h})
}

// AddBatch records every hash of hs in generation gen: Add for each, with
// one lock and one check.
func (s *Store) AddBatch(gen uint64, hs []Hash) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.admitLocked(gen); err != nil {
		return err
	}
	for _, h := range hs {
		s.addLocked(makeEntry(gen, h))
	}
	s.m.inserts.Add(float64(len(hs)))
	return s.maybeFlushLocked()
}

// admitLocked checks that gen may receive adds and records it; a
// generation newer than all others wakes the merger, which seals the ones
// below it.
func (s *Store) admitLocked(gen uint64) error {
	if s.err != nil {
		return s.err
	}
	if gen < s.floor {
		return fmt.Errorf("%w: generation %d, floor %d", ErrDropped, gen, s.floor)
	}
	i, found := slices.BinarySearch(s.live, gen)
	if !found {
		s.live = slices.Insert(s.live, i, gen)
	}
	if gen != s.adding {
		// Adds moved on: the generation they left can be sealed.
		if s.adding != 0 {
			s.signal()
		}
		s.adding = gen
	}
	return nil
}

func (s *Store) addLocked(k entry) { s.pending.add(k) }

func (s *Store) maybeFlushLocked() error {
	if s.pending.len() < s.opts.FlushKeys {
		return nil
	}
	return s.flushLocked()
}

// flushLocked writes the pending adds as one new run per generation.
func (s *Store) flushLocked() error {
	if s.err != nil || s.pending.len() == 0 {
		return s.err
	}
	order := s.pending.drain()
	for i := 0; i < len(order); {
		gen := order[i].gen
		j := i + 1
		for j < len(order) && order[j].gen == gen {
			j++
		}
		if gen >= s.floor { // else added before its generation was dropped
			if err := s.writeRunLocked(gen, order[i:j]); err != nil {
				return s.fail(fmt.Errorf("exact store: writing a run: %w", err))
			}
		}
		i = j
	}
	s.pending.reset()
	s.signal()
	return nil
}

func (s *Store) writeRunLocked(gen uint64, keys []entry) error {
	name := runName(gen, s.nextSeq)
	s.nextSeq++
	path := filepath.Join(s.dir, name)
	w, err := createRun(path, gen)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := w.add(k.hi, k.lo); err != nil {
			w.abort()
			return err
		}
	}
	size, err := w.finish()
	if err != nil {
		return err
	}
	s.m.written.Add(float64(size))
	r, err := openRun(path, name)
	if err != nil {
		return err
	}
	s.addRun(r)
	return nil
}

func (s *Store) fail(err error) error {
	s.err = err
	return err
}

// Has reports whether h was added to generation gen and not dropped since.
func (s *Store) Has(gen uint64, h Hash) (bool, error) {
	start := time.Now()
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	s.mu.Lock()
	found := s.hasLocked(gen, h)
	s.mu.Unlock()
	s.m.observe(start, found)
	return found, nil
}

func (s *Store) hasLocked(gen uint64, h Hash) bool {
	if gen < s.floor {
		return false
	}
	if s.pending.has(makeEntry(gen, h)) {
		return true
	}
	for _, r := range s.runs[gen] {
		if r.has(h) {
			return true
		}
	}
	return false
}

// Contains reports whether h is in any generation, checking the newest
// first. Use it to confirm a filter positive when the filter does not say
// which generation matched.
func (s *Store) Contains(h Hash) (bool, error) {
	start := time.Now()
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	s.mu.Lock()
	found := false
	for i := len(s.live) - 1; i >= 0 && !found; i-- {
		found = s.hasLocked(s.live[i], h)
	}
	s.mu.Unlock()
	s.m.observe(start, found)
	return found, nil
}

// DropBefore forgets every generation below gen (the filter dropped them):
// their runs are unmapped and deleted at once. A gen at or below the
// current floor changes nothing.
func (s *Store) DropBefore(gen uint64) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if gen <= s.floor {
		return nil
	}
	s.floor = gen
	i, _ := slices.BinarySearch(s.live, gen)
	for _, g := range s.live[:i] {
		s.removeRuns(g, slices.Clone(s.runs[g]))
	}
	s.live = slices.Delete(s.live, 0, i)
	// Pending adds of dropped generations are skipped when flushed.
	return nil
}

// Generations returns the generations that hold keys (or were added to),
// ascending.
func (s *Store) Generations() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.live)
}

// Floor returns the lowest generation not dropped.
func (s *Store) Floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor
}

// Stats describes the store for status pages and inspect.
type Stats struct {
	Generations []uint64
	Floor       uint64
	// DiskBytes is the size of the live run files (files only referenced
	// by unreleased checkpoints are not counted).
	DiskBytes int64
	// Keys counts the hashes in runs (a hash in two runs of a generation,
	// not merged yet, counts twice) plus PendingAdds.
	Keys int64
	// Runs is the number of run files; a lookup in a generation searches
	// each of its runs.
	Runs int
	// PendingAdds are in memory, not yet in a run.
	PendingAdds int
}

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := len(s.pending.drain()) // merged: counted once
	st := Stats{Generations: slices.Clone(s.live), Floor: s.floor, DiskBytes: s.disk, PendingAdds: held}
	st.Keys = int64(held)
	for _, rs := range s.runs {
		st.Runs += len(rs)
		for _, r := range rs {
			st.Keys += int64(r.n)
		}
	}
	return st
}

func (s *Store) diskBytes() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.disk)
}

// Close stops the merger, writes the pending adds and the manifest (so
// that Open of the same directory answers as this store did) and unmaps
// the runs. Snapshots not yet released stay readable; Open removes them.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	<-s.done
	s.m.unregister()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.flushLocked()
	if err == nil {
		err = writeManifest(s.dir, s.manifestLocked())
	}
	s.releaseRuns()
	if lerr := s.lock.Close(); lerr != nil && err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("closing exact store: %w", err)
	}
	return nil
}

// manifestLocked describes the runs as they are.
func (s *Store) manifestLocked() *manifest {
	m := &manifest{Layout: LayoutName, Floor: s.floor, NextSeq: s.nextSeq, Runs: []runRecord{}}
	for _, g := range s.live {
		for _, r := range s.runs[g] {
			m.Runs = append(m.Runs, runRecord{Name: r.name, Gen: g, Keys: r.n})
		}
	}
	slices.SortFunc(m.Runs, func(a, b runRecord) int { return strings.Compare(a.Name, b.Name) })
	return m
}
