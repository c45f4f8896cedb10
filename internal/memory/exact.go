package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/exact"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// Exact mode: behind each partition's filter an exact.Store of its keys'
// 128-bit hashes, in a local directory, confirms or refutes the filter's
// positives. A refuted positive (the filter's false positive) is answered
// "not seen" and the record is forwarded.
//
// Generations. Every generation of the filter gets a store generation: a
// number assigned in the order the filter opens generations (1, 2, …) and
// recorded per generation in the manifest (exact_generation) with the next
// one to assign. A filter generation's ID alone is ambiguous after a plan
// change (a legacy generation and a ring generation may share a span index
// of different spans), and neither start nor end times are unique or
// ordered as the filter drops generations; assignment order is both, and
// replay after a restore assigns the same numbers at the same records, so
// the store stays a pure function of the partition's events.
//
// Every record's hash is added to the store generation of the filter's
// newest generation (the filter adds it there too: a key is remembered a
// window after its latest sighting). A positive is confirmed by Has on the
// generations the filter reports it in (bloom.Shard.Matching), newest
// first: a Bloom filter has no false negatives, so a generation that really
// holds the key is among them. After a rotation the store drops every
// generation below the oldest the filter still holds (DropBefore). Legacy
// generations may outlive newer ring generations; those stay on disk until
// the floor passes them, and are never consulted (only generations the
// filter holds are).
//
// A generation without a store generation (0) was filled, at least in part,
// while exact mode was off (a checkpoint written without it, restored with
// it): its positives cannot be checked, and the filter's answer stands
// (counted as unverified). New generations are exact; the old ones leave
// the window within window·G/(G−1) of event time.

// ExactOptions turn on exact mode (Store.Exact).
type ExactOptions struct {
	// Dir holds one store per partition, in
	// Dir/<group>/<topic>/<partition> (names path-escaped). Empty: exact
	// mode is off. The directories are a cache of the checkpoints: a
	// partition's store is restored from the bucket when it is assigned,
	// reusing local files whose digest matches.
	Dir string
	// FlushKeys is exact.Options.FlushKeys (0: its default).
	FlushKeys int
	// Registerer receives the stores' metrics, labelled with topic and
	// partition, and bloomgate_exact_positives_total. Nil: not registered.
	Registerer prometheus.Registerer
	// Logger receives the stores' merge failures. Default: discard.
	Logger *slog.Logger
}

// Validate checks the options of an enabled exact mode.
func (o ExactOptions) Validate() error {
	if o.Dir == "" {
		return nil
	}
	return exact.Options{FlushKeys: o.FlushKeys}.Validate()
}

func (s *Store) exactOn() bool { return s.Exact.Dir != "" }

// exactDir is the local directory of tp's store.
func (s *Store) exactDir(tp topicPartition) string {
	return filepath.Join(s.Exact.Dir, escapeName(s.group), escapeName(tp.topic), strconv.Itoa(tp.partition))
}

// escapeName maps a group or topic name to one path element (as the
// checkpoint layout does).
func escapeName(n string) string {
	e := url.PathEscape(n)
	switch e {
	case "":
		return "%00"
	case ".", "..":
		return strings.ReplaceAll(e, ".", "%2E")
	}
	return e
}

func (s *Store) exactOptions(tp topicPartition) exact.Options {
	o := exact.Options{FlushKeys: s.Exact.FlushKeys, Logger: s.Exact.Logger}
	if s.Exact.Registerer != nil {
		o.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"topic": tp.topic, "partition": strconv.Itoa(tp.partition)}, s.Exact.Registerer)
	}
	if o.Logger != nil {
		o.Logger = o.Logger.With("topic", tp.topic, "partition", tp.partition)
	}
	return o
}

// positives is bloomgate_exact_positives_total, registered once per Store.
func (s *Store) positives() (*prometheus.CounterVec, error) {
	s.posOnce.Do(func() {
		s.pos = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_exact_positives_total",
			Help: "Filter positives checked against the exact store (replayed records included): confirmed (a duplicate), " +
				"refuted (a false positive avoided: forwarded), unverified (matched only generations filled before exact mode; the filter's answer stood).",
		}, []string{"topic", "partition", "result"})
		if s.Exact.Registerer == nil {
			return
		}
		if err := s.Exact.Registerer.Register(s.pos); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					s.pos = c
					return
				}
			}
			s.posErr = fmt.Errorf("registering exact mode metrics: %w", err)
		}
	})
	return s.pos, s.posErr
}

// generations is what exact mode uses of a filter of either kind: its
// generations as spans, which of them match a hash, and when they change
// (bloom.Shard and bloom.FingerprintShard).
type generations interface {
	Spans(dst []bloom.Span) []bloom.Span
	Matching(h bloom.Hash, dst []int) []int
	Changes(ts time.Time) bool
	TestAndAdd(h bloom.Hash, ts time.Time) bool
	TestAndAddBatch(hs []bloom.Hash, ts []time.Time, seen []bool)
	Config() bloom.Config
	Span() time.Duration
}

// exactKind is exact mode's wrapper around a filter of either kind: every
// positive of the filter is checked against the exact store x.
type exactKind struct {
	kind
	x *exactState
}

func (k *exactKind) stats() worker.FilterStats {
	fs := k.kind.stats()
	if k.x.st != nil {
		fs.Exact = k.x.stats()
	}
	return fs
}

// snapshot cuts the exact store at the filter's snapshot: both describe
// the same input offset.
func (k *exactKind) snapshot() (kindSnapshot, *exactSnapshot) {
	sn, _ := k.kind.snapshot()
	return sn, k.x.snapshot()
}

// exactState is a filter's exact store and the store generation of each of
// the filter's generations. It belongs to the filter's goroutine, like the
// filter.
type exactState struct {
	st    *exact.Store
	spans []bloom.Span // the shard's generations, as Spans lists them
	gens  []uint64     // the store generation of spans[i]; 0: unverifiable
	ids   map[bloom.Span]uint64
	next  uint64 // store generation of the next generation the filter opens

	match []int        // Matching scratch
	adds  []exact.Hash // adds to the newest generation, not yet in the store
	err   error        // the store's first failure: answers are untrusted since

	refuted, unverified               uint64
	mConfirmed, mRefuted, mUnverified prometheus.Counter
}

func (s *Store) newExactState(tp topicPartition, st *exact.Store, sh generations, ids map[bloom.Span]uint64, next uint64) (*exactState, error) {
	pos, err := s.positives()
	if err != nil {
		return nil, err
	}
	p := strconv.Itoa(tp.partition)
	x := &exactState{st: st, ids: map[bloom.Span]uint64{}, next: max(next, 1),
		mConfirmed:  pos.WithLabelValues(tp.topic, p, "confirmed"),
		mRefuted:    pos.WithLabelValues(tp.topic, p, "refuted"),
		mUnverified: pos.WithLabelValues(tp.topic, p, "unverified"),
	}
	// The shard's generations as restored; any the checkpoint did not map
	// are unverifiable.
	for _, sp := range sh.Spans(nil) {
		x.ids[sp] = ids[sp]
	}
	if err := x.sync(sh); err != nil {
		return nil, err
	}
	return x, nil
}

// sync follows a change of the shard's generations: a new generation gets
// the next store generation, dropped ones are forgotten, and the store
// drops every generation below the oldest one still held.
func (x *exactState) sync(sh generations) error {
	x.spans = sh.Spans(x.spans[:0])
	x.gens = x.gens[:0]
	for _, sp := range x.spans {
		g, ok := x.ids[sp]
		if !ok {
			g = x.next
			x.next++
			x.ids[sp] = g
		}
		x.gens = append(x.gens, g)
	}
	if len(x.ids) > len(x.spans) {
		held := make(map[bloom.Span]bool, len(x.spans))
		for _, sp := range x.spans {
			held[sp] = true
		}
		for sp := range x.ids {
			if !held[sp] {
				delete(x.ids, sp)
			}
		}
	}
	floor := x.next
	for _, g := range x.gens {
		if g != 0 && g < floor {
			floor = g
		}
	}
	if err := x.st.DropBefore(floor); err != nil {
		return x.fail(err)
	}
	return nil
}

func (x *exactState) fail(err error) error {
	if x.err == nil {
		x.err = fmt.Errorf("exact store: %w", err)
	}
	return x.err
}

// newest is the store generation of the filter's newest generation.
func (x *exactState) newest() uint64 {
	if len(x.gens) == 0 {
		return 0
	}
	return x.gens[len(x.gens)-1]
}

// settle decides the answer for h, whose TestAndAdd in sh returned seen,
// and queues h for the newest store generation. flush must run before the
// next generation change.
func (x *exactState) settle(sh generations, h bloom.Hash, seen bool) bool {
	if x.err != nil {
		return seen // untrusted either way: the worker checks Err
	}
	eh := exact.HashOf(h.H1, h.H2)
	inNewest := false
	if seen {
		// Earlier records of the batch may be this key.
		if x.flush() != nil {
			return seen
		}
		seen, inNewest = x.confirm(sh, h, eh)
	}
	if x.newest() != 0 && !inNewest { // a hash the newest holds needs no add
		x.adds = append(x.adds, eh)
	}
	return seen
}

// confirm checks a filter positive in the store generations of the
// generations that report h, newest first; inNewest: found in the newest.
func (x *exactState) confirm(sh generations, h bloom.Hash, eh exact.Hash) (seen, inNewest bool) {
	x.match = sh.Matching(h, x.match[:0])
	unverifiable := false
	newest := len(x.gens) - 1
	for _, pos := range x.match {
		g := x.gens[pos]
		if g == 0 {
			unverifiable = true
			continue
		}
		found, err := x.st.Has(g, eh)
		if err != nil {
			x.fail(err)
			return true, false
		}
		if found {
			x.mConfirmed.Inc()
			return true, pos == newest
		}
	}
	if unverifiable {
		x.unverified++
		x.mUnverified.Inc()
		return true, false
	}
	x.refuted++
	x.mRefuted.Inc()
	return false, false
}

// flush adds the queued hashes to the newest store generation.
func (x *exactState) flush() error {
	if len(x.adds) == 0 || x.err != nil {
		x.adds = x.adds[:0]
		return x.err
	}
	err := x.st.AddBatch(x.newest(), x.adds)
	x.adds = x.adds[:0]
	if err != nil {
		return x.fail(err)
	}
	return nil
}

// TestAndAdd is TestAndAdd of one filed hash in exact mode.
func (k *exactKind) TestAndAdd(h bloom.Hash, ts time.Time) bool {
	x, g := k.x, k.kind
	changes := g.Changes(ts)
	seen := g.TestAndAdd(h, ts)
	if changes && x.err == nil {
		x.sync(g)
	}
	seen = x.settle(g, h, seen)
	x.flush()
	return seen
}

// TestAndAddBatch is TestAndAddBatch of filed hashes in exact mode: runs
// of records that change no generation go through the shard's batch, the
// others one by one.
func (k *exactKind) TestAndAddBatch(hs []bloom.Hash, ts []time.Time, seen []bool) {
	x, g := k.x, k.kind
	for i := 0; i < len(hs); {
		if g.Changes(ts[i]) {
			seen[i] = k.TestAndAdd(hs[i], ts[i])
			i++
			continue
		}
		j := i + 1
		for j < len(hs) && !g.Changes(ts[j]) {
			j++
		}
		g.TestAndAddBatch(hs[i:j], ts[i:j], seen[i:j])
		for k := i; k < j; k++ {
			seen[k] = x.settle(g, hs[k], seen[k])
		}
		x.flush()
		i = j
	}
}

// Err reports the exact store's first failure (worker.FallibleFilter).
func (f *filter) Err() error {
	if f.x == nil {
		return nil
	}
	return f.x.err
}

func (x *exactState) stats() *worker.ExactStats {
	st := x.st.Stats()
	return &worker.ExactStats{RefutedPositives: x.refuted, UnverifiedPositives: x.unverified,
		Keys: uint64(max(st.Keys, 0)), DiskBytes: uint64(max(st.DiskBytes, 0))}
}

// exactSnapshot is the store cut at the filter's snapshot, and the store
// generation of every generation then.
type exactSnapshot struct {
	cut  *exact.Snapshot
	ids  map[bloom.Span]uint64
	next uint64
	err  error
}

func (x *exactState) snapshot() *exactSnapshot {
	es := &exactSnapshot{ids: maps.Clone(x.ids), next: x.next}
	if x.err == nil {
		x.flush()
	}
	if x.err != nil {
		es.err = x.err
		return es
	}
	es.cut, es.err = x.st.Cut()
	return es
}

func (es *exactSnapshot) release() {
	if es != nil && es.cut != nil {
		_ = es.cut.Release()
	}
}

// checkpoint describes the cut's files (hashing new ones: on the
// uploader's goroutine) for the manifest.
func (es *exactSnapshot) checkpoint(ctx context.Context) (*checkpoint.ExactCheckpoint, error) {
	if es.err != nil {
		return nil, fmt.Errorf("exact store checkpoint: %w", es.err)
	}
	if err := es.cut.Describe(ctx); err != nil {
		return nil, err
	}
	ec := &checkpoint.ExactCheckpoint{Layout: exact.LayoutName, Floor: es.cut.Floor, NextGen: es.next, Keys: es.cut.Keys}
	for _, f := range es.cut.Files {
		cut, name := es.cut, f.Name
		ec.Files = append(ec.Files, checkpoint.ExactSource{Name: f.Name, Size: f.Size, SHA256: f.SHA256,
			Open: func() (io.ReadCloser, error) { return cut.Open(name) }})
	}
	return ec, nil
}

// close closes the filter's store; the filter must not be used after.
func (f *filter) close() error {
	if f.x == nil || f.x.st == nil {
		return nil
	}
	err := f.x.st.Close()
	f.x.fail(exact.ErrClosed)
	f.x.st = nil
	return err
}

// track makes f the open store of tp, closing any other.
func (s *Store) track(tp topicPartition, f *filter) {
	s.mu.Lock()
	prev := s.open[tp]
	s.open[tp] = f
	s.mu.Unlock()
	if prev != nil && prev != f {
		s.closeFilter(tp, prev)
	}
}

// closeOpen closes tp's open store unless it belongs to keep.
func (s *Store) closeOpen(tp topicPartition, keep *filter) {
	s.mu.Lock()
	f := s.open[tp]
	if f != nil && f != keep {
		delete(s.open, tp)
	} else {
		f = nil
	}
	s.mu.Unlock()
	if f != nil {
		s.closeFilter(tp, f)
	}
}

func (s *Store) closeFilter(tp topicPartition, f *filter) {
	if err := f.close(); err != nil && s.Exact.Logger != nil {
		s.Exact.Logger.Warn("closing exact store", "topic", tp.topic, "partition", tp.partition, "err", err)
	}
}

// Close closes every partition's exact store (exact mode). Call it after
// the worker stopped.
func (s *Store) Close() error {
	s.mu.Lock()
	open := s.open
	s.open = map[topicPartition]*filter{}
	s.kept = map[topicPartition]keptFilter{}
	s.mu.Unlock()
	var errs []error
	for _, f := range open {
		errs = append(errs, f.close())
	}
	return errors.Join(errs...)
}

// newExactStore opens an empty store for tp, removing whatever its
// directory held (a new memory).
func (s *Store) newExactStore(tp topicPartition) (*exact.Store, error) {
	st, err := exact.Create(s.exactDir(tp), s.exactOptions(tp))
	if err != nil {
		return nil, err
	}
	return st, nil
}

// restoreExact rebuilds tp's store from the manifest of l for the restored
// shard sh, or starts an empty one when it has none (see the top of this
// file). In a partial load (l.Partial), a store whose files do not restore
// is lost (l.LoseExact, recorded in loss): the store starts empty, and
// every generation's positives are unverified until it leaves the window.
// Its keys are not rebuilt from the input: the filter still holds them,
// so no repeat is forwarded; only the filter's false positives among them
// go unrefuted (docs/checkpoints.md, "Partial restore").
func (b *handle) restoreExact(ctx context.Context, l *checkpoint.Loading, sh generations, loss *restoredLoss) (*exactState, error) {
	m := l.Manifest
	ids := map[bloom.Span]uint64{}
	if m.Exact == nil {
		x, err := b.emptyExact(sh)
		if err != nil {
			return nil, err
		}
		b.noticeWithoutExact(m, sh)
		return x, nil
	}
	x, err := b.restoreExactFiles(ctx, m, sh, ids, l.Open)
	if err == nil || !errors.Is(err, checkpoint.ErrCorrupt) || l.LoseExact(err) != nil {
		return x, err
	}
	loss.exactLost = err.Error()
	return b.emptyExact(sh)
}

// emptyExact starts an empty store for the restored shard sh: every
// generation it holds is unverified.
func (b *handle) emptyExact(sh generations) (*exactState, error) {
	st, err := b.s.newExactStore(b.tp)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", checkpoint.ErrLocal, err)
	}
	x, err := b.s.newExactState(b.tp, st, sh, map[bloom.Span]uint64{}, 1)
	if err != nil {
		st.Close()
		return nil, err
	}
	return x, nil
}

// restoreExactFiles restores the store m names into tp's directory.
func (b *handle) restoreExactFiles(ctx context.Context, m *checkpoint.Manifest, sh generations, ids map[bloom.Span]uint64,
	open func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error),
) (*exactState, error) {
	s, tp := b.s, b.tp
	ex := m.Exact
	if ex.Layout != exact.LayoutName {
		return nil, fmt.Errorf("%w: exact store layout %q, this build reads %q", checkpoint.ErrCorrupt, ex.Layout, exact.LayoutName)
	}
	// A ring generation names its exact generation; a table names one per
	// generation it holds, and two tables may name the same span (with the
	// same exact generation).
	name := func(id uint64, sp bloom.Span, eg uint64) error {
		if eg < ex.Floor || eg >= ex.NextGen {
			return fmt.Errorf("%w: generation %d names exact generation %d outside [%d, %d)", checkpoint.ErrCorrupt, id, eg, ex.Floor, ex.NextGen)
		}
		if prev, ok := ids[sp]; ok && prev != eg {
			return fmt.Errorf("%w: generation %d names exact generations %d and %d for one span", checkpoint.ErrCorrupt, id, prev, eg)
		}
		ids[sp] = eg
		return nil
	}
	for _, g := range m.Generations {
		if g.ExactGen != 0 {
			if err := name(g.ID, bloom.Span{Start: g.Start.UnixNano(), End: g.End.UnixNano()}, g.ExactGen); err != nil {
				return nil, err
			}
		}
		for _, e := range g.ExactGens {
			if err := name(g.ID, bloom.Span{Start: e.Start, End: e.End}, e.Gen); err != nil {
				return nil, err
			}
		}
	}
	seen := map[uint64]bool{}
	for _, g := range ids {
		if seen[g] {
			return nil, fmt.Errorf("%w: exact generation %d named twice", checkpoint.ErrCorrupt, g)
		}
		seen[g] = true
	}
	files := make([]exact.File, len(ex.Files))
	refs := make(map[string]checkpoint.ExactFile, len(ex.Files))
	for i, f := range ex.Files {
		files[i] = exact.File{Name: f.Name, Size: f.Size, SHA256: f.SHA256}
		refs[f.Name] = f
	}
	st, err := exact.Restore(ctx, s.exactDir(tp), files, func(ctx context.Context, f exact.File) (io.ReadCloser, error) {
		return open(ctx, refs[f.Name].Ref())
	}, s.exactOptions(tp))
	switch {
	case err == nil:
	case errors.Is(err, exact.ErrCorrupt):
		return nil, fmt.Errorf("%w: %w", checkpoint.ErrCorrupt, err)
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrUnavailable), ctx.Err() != nil:
		return nil, err // the bucket's: fall back, or give up, as for generations
	default:
		// Everything else is this machine's (disk, mmap, files, the lock,
		// metrics): the checkpoint may be sound, so no fallback.
		return nil, fmt.Errorf("%w: %w", checkpoint.ErrLocal, err)
	}
	x, err := s.newExactState(tp, st, sh, ids, ex.NextGen)
	if err != nil {
		st.Close()
		return nil, err
	}
	return x, nil
}

// noticeWithoutExact says, once per partition, what restoring a checkpoint
// written without exact mode means.
func (b *handle) noticeWithoutExact(m *checkpoint.Manifest, sh generations) {
	if !b.s.first(b.tp, "exact-missing") {
		return
	}
	var last time.Time
	for _, sp := range sh.Spans(nil) {
		if end := time.Unix(0, sp.End); end.After(last) {
			last = end
		}
	}
	// A ring generation ending at E is dropped once event time reaches
	// E + (G−1)·span ≥ E + window; a legacy one at E + window.
	stay := time.Duration(sh.Config().Generations-1) * sh.Span()
	msg := fmt.Sprintf("checkpoint %d of %s/%d was written without exact mode (or after its exact store was lost): the exact store starts empty. "+
		"Positives that match only the restored generations cannot be checked and count as duplicates, as without --exact "+
		"(bloomgate_exact_positives_total{result=\"unverified\"}); generations opened from now on are exact", m.Seq, m.Topic, m.Partition)
	if !last.IsZero() {
		msg += fmt.Sprintf(". The restored generations leave the window by event time %s at the latest",
			last.Add(stay).UTC().Format(time.RFC3339))
	}
	b.p.Logger().Warn(msg, "seq", m.Seq)
}
