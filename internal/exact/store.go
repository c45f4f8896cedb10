package exact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
// DropBefore, Checkpoint) leaves the store unusable: every later call
// returns the same error, and the caller restores from its last
// checkpoint.
type Store struct {
	dir   string
	opts  Options
	db    *pebble.DB
	cache *pebble.Cache // private cache to release on Close; nil if shared
	log   *slog.Logger
	m     *metrics

	// life is held shared by every operation that uses db and exclusively
	// by Close.
	life   sync.RWMutex
	closed bool

	mu      sync.Mutex
	pending map[dataKey]struct{} // adds not yet applied to pebble
	order   []dataKey            // pending in arrival order, sorted on apply
	gens    []uint64             // generations that may hold keys, ascending, all ≥ floor
	floor   uint64               // generations below it are dropped (logically at once)
	applied uint64               // the floor pebble has been told (≤ floor)
	drops   []uint64             // dropped generations whose keys pebble still holds
	cutting bool                 // a checkpoint is capturing pebble's state: apply nothing
	err     error                // sticky write failure

	// sealTarget: every generation below it is sealed (no longer the
	// newest) and should be compacted into stable tables.
	sealTarget uint64
	sealCh     chan struct{}
	cancel     context.CancelFunc
	done       chan struct{}

	cpMu  sync.Mutex      // one Checkpoint at a time
	cpSeq uint64          // names checkpoint directories
	sums  map[string]File // checksums of tables already described (immutable files)
}

// Open opens the store in dir, creating an empty one when dir does not
// exist or is empty. A directory that holds something other than a store
// of this layout is refused.
//
// Open a directory only if it is known to match the caller's state: after
// a crash it holds whatever pebble had flushed, which may include adds
// past the caller's last checkpoint. After a crash or a move, Restore from
// the checkpoint instead (it reuses local files that are still valid).
//
// Open starts pebble's background work and one goroutine of its own (the
// sealing compactions); Close stops them and waits.
func Open(dir string, opts Options) (*Store, error) {
	return openStore(dir, opts, nil, false)
}

// openStore opens dir; known seeds the checksum cache (from Restore), and
// mustExist refuses to create a store.
func openStore(dir string, opts Options, known map[string]File, mustExist bool) (_ *Store, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	// Checkpoint directories of an earlier process: their uploads are over
	// or abandoned.
	if err := os.RemoveAll(filepath.Join(dir, snapshotsDir)); err != nil {
		return nil, fmt.Errorf("opening exact store: removing old checkpoint directories: %w", err)
	}
	populated, err := hasEntries(dir)
	if err != nil {
		return nil, fmt.Errorf("opening exact store: %w", err)
	}
	cache := opts.Cache
	var private *pebble.Cache
	if cache == nil {
		private = pebble.NewCache(opts.CacheBytes)
		cache = &Cache{c: private}
	}
	defer func() {
		if err != nil && private != nil {
			private.Unref()
		}
	}()
	po := opts.pebbleOptions(cache.c)
	po.ErrorIfNotExists = populated || mustExist
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("opening exact store in %s: %w", dir, err)
	}
	s := &Store{
		dir: dir, opts: opts, db: db, cache: private, log: opts.Logger,
		pending: make(map[dataKey]struct{}, opts.BatchKeys),
		sealCh:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		sums:    known,
	}
	if s.sums == nil {
		s.sums = make(map[string]File)
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening exact store in %s: %w", dir, err)
	}
	if s.m, err = newMetrics(opts.Registerer, s); err != nil {
		_ = db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if n := len(s.gens); n > 1 {
		s.sealTarget = s.gens[n-1]
		s.sealCh <- struct{}{}
	}
	go s.sealLoop(ctx)
	return s, nil
}

// load checks the layout record (writing it into a new store) and reads
// the floor and the generations present.
func (s *Store) load() error {
	layout, err := s.get(metaLayout)
	if err != nil {
		return err
	}
	empty, err := s.rangeEmpty(nil, metaPrefix)
	if err != nil {
		return err
	}
	switch {
	case layout == nil && empty:
		if err := s.db.Set(metaLayout, []byte(LayoutName), pebble.NoSync); err != nil {
			return fmt.Errorf("writing layout record: %w", err)
		}
		// Flushed at once, so that a reopened empty store is recognized.
		if err := s.db.Flush(); err != nil {
			return fmt.Errorf("writing layout record: %w", err)
		}
	case layout == nil:
		return fmt.Errorf("not an exact store: keys without a layout record")
	case string(layout) != LayoutName:
		return fmt.Errorf("store layout %q: this build reads %q", layout, LayoutName)
	}
	floor, err := s.get(metaFloor)
	if err != nil {
		return err
	}
	if floor != nil {
		g, ok := keyGen(floor)
		if !ok || len(floor) != 8 {
			return fmt.Errorf("floor record of %d bytes: want 8", len(floor))
		}
		s.floor, s.applied = g, g
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: genPrefix(s.floor), UpperBound: metaPrefix})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; {
		g, _ := keyGen(it.Key())
		s.gens = append(s.gens, g)
		ok = it.SeekGE(genPrefix(g + 1)) // g < MaxUint64: below metaPrefix
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("listing generations: %w", err)
	}
	return nil
}

// get returns a copy of key's value, nil if absent.
func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v = bytes.Clone(v)
	if v == nil {
		v = []byte{}
	}
	return v, closer.Close()
}

func (s *Store) rangeEmpty(lower, upper []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false, err
	}
	found := it.First()
	return !found, it.Close()
}

func hasEntries(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return len(ents) > 0, err
}

// Add records h in generation gen. It is visible to Has and Contains when
// Add returns, and part of every checkpoint taken after that.
func (s *Store) Add(gen uint64, h Hash) error {
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
	s.addLocked(makeKey(gen, h))
	s.m.inserts.Inc()
	return s.maybeApplyLocked()
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
		s.addLocked(makeKey(gen, h))
		if err := s.maybeApplyLocked(); err != nil {
			return err
		}
	}
	s.m.inserts.Add(float64(len(hs)))
	return nil
}

// admitLocked checks that gen may receive adds and records it; a
// generation newer than all others seals the ones below it.
func (s *Store) admitLocked(gen uint64) error {
	if s.err != nil {
		return s.err
	}
	if gen > MaxGeneration {
		return fmt.Errorf("exact store: generation %d is reserved (max %d)", gen, uint64(MaxGeneration))
	}
	if gen < s.floor {
		return fmt.Errorf("%w: generation %d, floor %d", ErrDropped, gen, s.floor)
	}
	i, found := slices.BinarySearch(s.gens, gen)
	if found {
		return nil
	}
	s.gens = slices.Insert(s.gens, i, gen)
	if n := len(s.gens); n > 1 && s.gens[n-1] > s.sealTarget {
		s.sealTarget = s.gens[n-1]
		select {
		case s.sealCh <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *Store) addLocked(k dataKey) {
	if _, ok := s.pending[k]; ok {
		return
	}
	s.pending[k] = struct{}{}
	s.order = append(s.order, k)
}

func (s *Store) maybeApplyLocked() error {
	if len(s.order) < s.opts.BatchKeys {
		return nil
	}
	return s.applyLocked()
}

// applyLocked writes the pending adds (sorted: pebble's memtable inserts a
// sorted batch with far fewer comparisons) and a pending drop to pebble as
// one batch. Nothing is applied while a checkpoint captures pebble's state.
func (s *Store) applyLocked() error {
	if s.err != nil || s.cutting {
		return s.err
	}
	drop := s.floor > s.applied
	if len(s.order) == 0 && !drop {
		return nil
	}
	slices.SortFunc(s.order, func(a, b dataKey) int { return bytes.Compare(a[:], b[:]) })
	b := s.db.NewBatch()
	defer b.Close()
	floorKey := genPrefix(s.floor)
	for i := range s.order {
		k := s.order[i][:]
		if bytes.Compare(k, floorKey) < 0 {
			continue // added before its generation was dropped
		}
		if err := b.Set(k, nil, nil); err != nil {
			return s.fail(fmt.Errorf("applying adds: %w", err))
		}
	}
	if drop {
		// One range deletion per dropped generation, not one for all: a
		// deletion that spanned generations would make its table span them
		// too, and compacting it would rewrite the tables of the sealed
		// generations it overlaps.
		for _, g := range s.drops {
			if err := b.DeleteRange(genPrefix(g), genPrefix(g+1), nil); err != nil {
				return s.fail(fmt.Errorf("dropping generation %d: %w", g, err))
			}
		}
		if err := b.Set(metaFloor, floorKey, nil); err != nil {
			return s.fail(fmt.Errorf("dropping generations below %d: %w", s.floor, err))
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return s.fail(fmt.Errorf("applying adds: %w", err))
	}
	clear(s.pending)
	s.order = s.order[:0]
	if drop {
		s.applied = s.floor
		s.drops = s.drops[:0]
		// The range deletion frees disk space only once it is in a table
		// (then pebble deletes the tables it covers without rewriting
		// them); don't wait for the memtable to fill.
		if _, err := s.db.AsyncFlush(); err != nil {
			return s.fail(fmt.Errorf("flushing after a drop: %w", err))
		}
	}
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
	k := makeKey(gen, h)
	s.mu.Lock()
	dropped := gen < s.floor
	_, found := s.pending[k]
	found = found && !dropped
	s.mu.Unlock()
	var err error
	if !found && !dropped {
		found, err = s.lookup(k)
	}
	s.m.observe(start, found, err)
	return found, err
}

// Contains reports whether h is in any generation, checking the newest
// first: one lookup per generation until found. Use it to confirm a
// filter positive when the filter does not say which generation matched.
func (s *Store) Contains(h Hash) (bool, error) {
	start := time.Now()
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	s.mu.Lock()
	gens := slices.Clone(s.gens)
	found := false
	for _, g := range gens {
		if _, ok := s.pending[makeKey(g, h)]; ok {
			found = true
			break
		}
	}
	s.mu.Unlock()
	var err error
	for i := len(gens) - 1; i >= 0 && !found && err == nil; i-- {
		found, err = s.lookup(makeKey(gens[i], h))
	}
	s.m.observe(start, found, err)
	return found, err
}

func (s *Store) lookup(k dataKey) (bool, error) {
	_, closer, err := s.db.Get(k[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("exact store lookup: %w", err)
	}
	return true, closer.Close()
}

// DropBefore forgets every generation below gen (the filter dropped them):
// one range deletion per generation that holds keys. Has and Contains stop finding their keys at once;
// pebble deletes the tables wholly covered in the background (they hold
// one generation each, so nothing is rewritten). A gen at or below the
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
	if gen > MaxGeneration {
		return fmt.Errorf("exact store: generation %d is reserved (max %d)", gen, uint64(MaxGeneration))
	}
	s.floor = gen
	i, _ := slices.BinarySearch(s.gens, gen)
	s.drops = append(s.drops, s.gens[:i]...)
	s.gens = slices.Delete(s.gens, 0, i)
	// Applied now, or when a checkpoint in progress has captured its
	// state (which must not contain this drop).
	return s.applyLocked()
}

// Generations returns the generations that hold keys (or were added to),
// ascending.
func (s *Store) Generations() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.gens)
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
	// DiskBytes is what the store's directory holds (tables, manifest,
	// checkpoint hard links not yet released count once).
	DiskBytes uint64
	// Tables is the number of live tables.
	Tables int64
	// PendingAdds are buffered in memory, not yet applied to pebble.
	PendingAdds int
	// CacheBytes is the block cache's current use (shared caches count
	// every store's blocks).
	CacheBytes int64
}

// Stats returns the current figures.
func (s *Store) Stats() (Stats, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return Stats{}, ErrClosed
	}
	s.mu.Lock()
	st := Stats{Generations: slices.Clone(s.gens), Floor: s.floor, PendingAdds: len(s.order)}
	s.mu.Unlock()
	m := s.db.Metrics()
	st.DiskBytes = m.DiskSpaceUsage()
	st.Tables = m.Total().TablesCount
	st.CacheBytes = m.BlockCache.Size
	return st, nil
}

// diskBytes is Stats().DiskBytes for the metrics gauge (0 once closed).
func (s *Store) diskBytes() float64 {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return 0
	}
	return float64(s.db.Metrics().DiskSpaceUsage())
}

// sealLoop compacts generations that are no longer the newest into the
// lowest level their range reaches. Their tables then stay as they are
// until the generation is dropped (at most moved between levels, which
// keeps the file), so checkpoints upload a sealed generation's tables once
// more after it is sealed and never again. It changes no answer.
func (s *Store) sealLoop(ctx context.Context) {
	defer close(s.done)
	var sealed uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sealCh:
		}
		s.mu.Lock()
		target := s.sealTarget
		s.mu.Unlock()
		if target <= sealed {
			continue
		}
		if err := s.seal(ctx, target); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("exact store: sealing compaction failed; the next new generation retries", "below", target, "err", err)
			}
			continue
		}
		sealed = target
	}
}

// seal compacts each generation below the given one whose tables are not
// yet settled (settled). A settled generation is left alone: compacting
// it again would rewrite its bottom-level tables for nothing, and every
// rewritten table is uploaded again.
func (s *Store) seal(ctx context.Context, below uint64) error {
	s.mu.Lock()
	gens := slices.Clone(s.gens)
	s.mu.Unlock()
	for _, g := range gens {
		if g >= below {
			break
		}
		ok, err := s.settled(g)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		start := time.Now()
		if err := s.db.Compact(ctx, genPrefix(g), genPrefix(g+1), false); err != nil {
			return err
		}
		s.log.Debug("exact store: sealed generation", "generation", g, "took", time.Since(start))
	}
	return nil
}

// settled reports whether generation g's tables are all in one level
// (just one table if that is L0). Tables never span generations, so
// automatic compactions can then only move them (same file) to a lower
// level, never rewrite them.
func (s *Store) settled(g uint64) (bool, error) {
	levels, err := s.db.SSTables(pebble.WithKeyRangeFilter(genPrefix(g), genPrefix(g+1)))
	if err != nil {
		return false, err
	}
	level, n := -1, 0
	for l, tables := range levels {
		for _, t := range tables {
			if tg, ok := keyGen(t.Smallest.UserKey); !ok || tg != g {
				continue // a range deletion below the floor, not g's data
			}
			if level >= 0 && level != l {
				return false, nil
			}
			level = l
			n++
		}
	}
	return level != 0 || n <= 1, nil
}

// Close stops background work, applies pending adds, flushes them (so
// that Open of the same directory answers as this store did) and closes
// pebble. Snapshots not yet released stay readable; Open removes them.
func (s *Store) Close() error {
	s.cancel()
	<-s.done
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.m.unregister()
	s.mu.Lock()
	err := s.applyLocked()
	s.mu.Unlock()
	if err == nil {
		if ferr := s.db.Flush(); ferr != nil {
			err = fmt.Errorf("flushing exact store: %w", ferr)
		}
	}
	if cerr := s.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing exact store: %w", cerr)
	}
	if s.cache != nil {
		s.cache.Unref()
	}
	return err
}
