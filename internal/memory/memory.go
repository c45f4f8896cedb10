// Package memory is the production worker.StateStore: the dedup memory of
// each input partition is a rotating bloom.Shard (or, with Store.Kind
// fingerprint, a bloom.FingerprintShard: fingerprint.go), checkpointed as
// generation (table) objects plus manifests in a checkpoint.Store. It is the one place that
// knows both the filter and the store; the worker knows neither (it sees
// worker.Filter and worker.PartitionStore), the filter never knows Kafka, and
// the store never decodes a filter.
//
// One type describes a filter's settings, filterplan.Params: the worker
// plans with it (worker.FilterParams is the same type), the filter is
// sized by it (bloom.Config converts from it) and a manifest records it
// (checkpoint.FilterParams, with the filter's kind). Sentinel errors are
// mapped here: the store's (checkpoint.ErrFenced, …) are translated into
// the worker's (worker.ErrFenced, …) by storeErr, so that neither package
// imports the other.
//
// Cost: Restore downloads and decodes every generation of the newest usable
// checkpoint and replays the log segments of the live one (or reuses the
// filter this process checkpointed last, see Store); when no checkpoint
// loads whole, the newest loads in part and its lost generations are
// refilled from the input by the worker (lost.go); Commit uploads any
// generation sealed since the previous commit and, for the live generation,
// either the hashes it added since (a log segment, 16 bytes per new key)
// or the whole generation when the log would exceed
// checkpoint.MaxLogShare of it; a filter operation is one blocked-Bloom
// probe per generation, plus a 16-byte append to the journal per new key.
package memory

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/errmark"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// topicPartition names one input partition.
type topicPartition struct {
	topic     string
	partition int
}

// Store is the production worker.StateStore: bloom shards, checkpointed as
// generation objects plus manifests in a checkpoint.Store.
//
// It keeps the filter of a partition whose last checkpoint this process
// wrote: kafka-go rebalances eagerly, so every rebalance revokes every
// partition, and a partition that comes back to this worker is then resumed
// from memory instead of downloading and decoding its checkpoint again —
// but only if the store's newest manifest is the one this process committed
// last and the filter did not change since (see Restore).
type Store struct {
	store *checkpoint.Store
	group string
	// MaxGenerationBytes caps one decoded generation (≤ 0: bloom's limit).
	MaxGenerationBytes int64
	// MaxTimeJump bounds how far one record may move a partition's event
	// time forward (≤ 0: unbounded). A record stamped further ahead is
	// filed at frontier + MaxTimeJump, so a single bad timestamp (a
	// producer clock years ahead) cannot rotate the ring and make the
	// partition forget keys inside the window. After a real gap the
	// frontier catches up by MaxTimeJump per record; meanwhile keys are
	// kept longer, never shorter. The frontier is checkpointed, so replay
	// decides as the original run did.
	MaxTimeJump time.Duration
	// Key is what defines the keys (key spec, normalization, hash). It is
	// recorded in every manifest; a checkpoint recorded with a different
	// one is refused at restore (its keys would match none of the new
	// ones, and duplicates would pass for up to a window). Checkpoints
	// without a record are accepted with a warning (once per partition)
	// naming the settings assumed, and get one with the next commit.
	Key checkpoint.KeyIdentity
	// Isolation is the isolation level the worker reads at, recorded in
	// every manifest ("": not recorded). A checkpoint built at another
	// level is restored, with a warning: the records replayed after it
	// are judged at the new level.
	Isolation worker.IsolationLevel
	// UnkeyedHash makes new memories use the unkeyed hash (seed 0), as
	// memories from before seeds do: only for comparisons and tests.
	UnkeyedHash bool
	// Exact turns on exact mode when its Dir is set (exact.go): an exact
	// store per partition behind the filter. Close the Store after the
	// worker stopped.
	Exact ExactOptions
	// Kind is the filter new memories get and checkpoints must have been
	// written with: KindRing ("" too) or KindFingerprint (fingerprint.go).
	Kind string

	mu     sync.Mutex
	kept   map[topicPartition]keptFilter
	open   map[topicPartition]*filter // filters whose exact store is open
	warned map[warning]bool
	reuse  atomic.Int64 // restores served from memory

	posOnce sync.Once
	pos     *prometheus.CounterVec
	posErr  error
}

// warning is one kind of restore notice about one partition, logged once.
type warning struct {
	tp   topicPartition
	kind string
}

// keptFilter is a filter whose state equals manifest seq.
type keptFilter struct {
	seq     uint64
	filter  *filter
	inserts uint64 // filter.inserts when seq was written
}

// New checkpoints the partitions of group in store.
func New(store *checkpoint.Store, group string) *Store {
	return &Store{store: store, group: group, kept: map[topicPartition]keptFilter{}, open: map[topicPartition]*filter{}, warned: map[warning]bool{}}
}

// first reports whether this is the first notice of kind for tp.
func (s *Store) first(tp topicPartition, kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := warning{tp, kind}
	if s.warned[w] {
		return false
	}
	s.warned[w] = true
	return true
}

// Retain drops kept filters of partitions not in the new assignment, and
// closes their exact stores; the worker calls it at the start of each
// generation.
func (s *Store) Retain(topic string, partitions []int) {
	keep := map[int]bool{}
	for _, p := range partitions {
		keep[p] = true
	}
	s.mu.Lock()
	var closing []*filter
	var at []topicPartition
	for tp := range s.kept {
		if tp.topic != topic || !keep[tp.partition] {
			delete(s.kept, tp)
		}
	}
	for tp, f := range s.open {
		if tp.topic != topic || !keep[tp.partition] {
			delete(s.open, tp)
			closing, at = append(closing, f), append(at, tp)
		}
	}
	s.mu.Unlock()
	for i, f := range closing {
		s.closeFilter(at[i], f)
	}
}

func (s *Store) take(tp topicPartition) (keptFilter, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kept[tp]
	delete(s.kept, tp)
	return k, ok
}

// NewFilter returns an empty shard: a new memory, with a new secret hash
// seed (see bloom.Seed) unless UnkeyedHash is set. In exact mode a filter
// belongs to its partition: the worker takes it from the partition's handle
// (worker.PartitionFilterMaker), and NewFilter refuses.
func (s *Store) NewFilter(p worker.FilterParams) (worker.Filter, error) {
	if s.exactOn() {
		return nil, errors.New("creating filter: in exact mode a filter belongs to its partition: ask the partition's handle")
	}
	return s.newFilter(p)
}

func (s *Store) newFilter(p worker.FilterParams) (*filter, error) {
	f := &filter{maxJump: s.MaxTimeJump}
	if s.fingerprint() {
		fp, err := bloom.NewFingerprintShard(bloom.Config(p))
		if err != nil {
			return nil, fmt.Errorf("creating filter: %w", err)
		}
		fp.EnableJournalShares(tableLogShare, sealedTableLogShare, checkpoint.MaxLogEntries)
		f.k = tables{fp}
	} else {
		sh, err := bloom.NewShard(bloom.Config(p))
		if err != nil {
			return nil, fmt.Errorf("creating filter: %w", err)
		}
		sh.EnableJournal(checkpoint.MaxLogShare, checkpoint.MaxLogEntries)
		f.k = ring{sh}
	}
	if !s.UnkeyedHash {
		var err error
		if f.seed, err = bloom.NewSeed(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// NewFilter returns an empty filter of the partition (a new memory); in
// exact mode with an empty exact store, replacing what its directory held.
func (b *handle) NewFilter(p worker.FilterParams) (worker.Filter, error) {
	f, err := b.s.newFilter(p)
	if err != nil || !b.s.exactOn() {
		return f, err
	}
	b.s.closeOpen(b.tp, nil)
	st, err := b.s.newExactStore(b.tp)
	if err != nil {
		return nil, fmt.Errorf("creating exact store: %w", err)
	}
	if f.x, err = b.s.newExactState(b.tp, st, f.k, nil, 1); err != nil {
		st.Close()
		return nil, err
	}
	f.k = &exactKind{f.k, f.x}
	b.s.track(b.tp, f)
	return f, nil
}

// Partition returns a checkpoint handle of one input partition.
func (s *Store) Partition(topic string, partition int) worker.PartitionStore {
	return &handle{s: s, tp: topicPartition{topic, partition}, p: s.store.Partition(s.group, topic, partition)}
}

type filter struct {
	k       kind       // the filter of the Store's kind (kind.go), in exact mode wrapped
	seed    bloom.Seed // the memory's hash seed, checkpointed with it
	inserts uint64     // TestAndAdd calls, to tell whether the filter changed

	maxJump  time.Duration
	frontier int64  // newest event time filed, Unix ns; 0: none yet
	clamped  uint64 // records filed earlier than their timestamp

	x *exactState // exact mode's store (k is its exactKind); nil: filter only

	// from is where the keys of generations opened since the last
	// committed state begin (lost.go); nil: not known. committed is the
	// point of the state a commit just stored, taken over by the next
	// Snapshot (commits run on another goroutine).
	from      *checkpoint.KeysFrom
	committed atomic.Pointer[checkpoint.KeysFrom]
	lost      []*lostGen // generations restored empty, until the rebuild ends
}

func (f *filter) TestAndAdd(key []byte, ts time.Time) bool {
	f.inserts++
	return f.k.TestAndAdd(f.seed.Hash(key), f.file(ts))
}

func (f *filter) TestAndAddBatch(keys [][]byte, ts []time.Time, seen []bool) {
	f.inserts += uint64(len(keys))
	sc := batchScratches.Get().(*batchScratch)
	defer batchScratches.Put(sc)
	hs, fts := sc.hs[:0], sc.ts[:0]
	for i, k := range keys {
		hs = append(hs, f.seed.Hash(k))
		fts = append(fts, f.file(ts[i]))
	}
	sc.hs, sc.ts = hs, fts
	f.k.TestAndAddBatch(hs, fts, seen)
}

// batchScratch holds a TestAndAddBatch call's hashes and filed times.
// The scratch is shared by all partitions through a pool instead of kept
// per partition: only partitions testing a batch at that moment (about
// one per CPU) hold one, where per partition every assigned partition
// kept ~40 bytes per record of its largest batch (at 64 partitions 8 MB;
// docs/benchmarks-journal.md, "Buffers per partition").
type batchScratch struct {
	hs []bloom.Hash
	ts []time.Time
}

var batchScratches = sync.Pool{New: func() any { return new(batchScratch) }}

// file returns the event time a record with timestamp ts is filed under:
// ts, or at most maxJump past the newest time filed so far.
func (f *filter) file(ts time.Time) time.Time {
	ns, clamped := fileAt(&f.frontier, f.maxJump, ts.UnixNano())
	if !clamped {
		return ts
	}
	f.clamped++
	return time.Unix(0, ns)
}

func (f *filter) Stats() worker.FilterStats {
	fs := f.k.stats()
	fs.ClampedTimestamps = f.clamped
	return fs
}

// Snapshot freezes the filter (copy-on-write) and, in exact mode, cuts the
// exact store at the same record: both describe the same input offset.
func (f *filter) Snapshot() worker.Snapshot {
	if kf := f.committed.Swap(nil); kf != nil {
		f.from = kf
	}
	sn := &snapshot{from: f, inserts: f.inserts, frontier: f.frontier, keysFrom: f.from}
	sn.k, sn.exact = f.k.snapshot()
	return sn
}

// Seed reports the filter's hash seed (tests).
func (f *filter) Seed() bloom.Seed { return f.seed }

// ProvenanceKey is the key of the records this memory writes
// (worker.ProvenanceKeyer): derived from the secret hash seed, so it is
// kept by every checkpoint of the memory without being stored apart, and a
// new memory gets a new one. The unkeyed hash (zero seed) gives a key
// anyone can compute.
func (f *filter) ProvenanceKey() []byte {
	var k [16]byte
	binary.LittleEndian.PutUint64(k[:8], f.seed.K1)
	binary.LittleEndian.PutUint64(k[8:], f.seed.K2)
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte("bloomgate provenance key v1"))
	return m.Sum(nil)
}

type snapshot struct {
	k        kindSnapshot
	from     *filter
	inserts  uint64
	frontier int64
	keysFrom *checkpoint.KeysFrom // where generations new since the last commit got their keys
	exact    *exactSnapshot       // exact mode
}

func (b *snapshot) Release() {
	b.k.Release()
	b.exact.release()
}

type handle struct {
	s  *Store
	tp topicPartition
	p  *checkpoint.Partition
}

// storeErr maps checkpoint sentinels to the worker's.
func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, checkpoint.ErrFenced):
		return fmt.Errorf("%w: %w", worker.ErrFenced, err)
	case errors.Is(err, worker.ErrNoUsableCheckpoint):
		return err // an *IncompatibleError: worded for the worker already
	case errors.Is(err, checkpoint.ErrNoUsableCheckpoint):
		return errmark.Mark(err, worker.ErrNoUsableCheckpoint) // "no usable checkpoint" is not written twice
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		return fmt.Errorf("%w: %w", worker.ErrNoCheckpoint, err)
	}
	return err
}

func (b *handle) Restore(ctx context.Context, params worker.FilterParams) (*worker.Restored, error) {
	rs := &restoring{b: b, params: params}
	rs.kept, rs.haveKept = b.s.take(b.tp)
	m, err := b.p.RestoreWith(ctx, func(l *checkpoint.Loading) error { return rs.load(ctx, l) })
	if err != nil {
		rs.dropExact()
		return nil, storeErr(err)
	}
	if rs.reused != nil {
		b.s.reuse.Add(1)
		b.s.closeOpen(b.tp, rs.reused)
		return restoredOf(m, rs.reused), nil
	}
	k, x := rs.k, rs.x
	if x != nil {
		k = &exactKind{k, x}
	}
	f := &filter{k: k, seed: rs.seed, maxJump: b.s.MaxTimeJump, frontier: m.EventTime, x: x}
	b.notice(m, params, f)
	if x != nil {
		b.s.track(b.tp, f)
	} else if m.Exact != nil && b.s.first(b.tp, "exact-off") {
		b.p.Logger().Info(fmt.Sprintf("checkpoint %d of %s/%d holds an exact store, and exact mode is off: it is not restored, and the next checkpoint does not carry it "+
			"(turning exact mode on again later starts an empty store)", m.Seq, m.Topic, m.Partition), "seq", m.Seq)
	}
	if rs.seed.IsZero() && b.s.first(b.tp, "unkeyed-provenance") {
		b.p.Logger().Warn(fmt.Sprintf("checkpoint %d of %s/%d is a memory with the unkeyed hash (from before hash seeds): "+
			"the provenance of the records it writes is not secret, so another writer of the output, duplicates or dead-letter "+
			"topics could forge records that recovery takes as written. Start a new memory (a new group, or on-restore-failure=empty) to get a keyed one",
			m.Seq, m.Topic, m.Partition))
	}
	r := restoredOf(m, f)
	r.Lost = f.lostFrom(m, rs.loss)
	return r, nil
}

// restoring is one Restore of a partition: what the manifest being loaded
// gave so far. The checkpoint store may load several manifests, newest
// first, until one verifies; each load starts over.
type restoring struct {
	b        *handle
	params   worker.FilterParams
	kept     keptFilter // this process's last written state of the partition
	haveKept bool

	k      kind
	seed   bloom.Seed
	reused *filter     // the kept filter, when it is the manifest's state
	x      *exactState // the exact store of the manifest being loaded
	loss   restoredLoss
}

// dropExact closes the exact store of a manifest whose load failed.
func (rs *restoring) dropExact() {
	if rs.x != nil {
		rs.x.st.Close()
		rs.x = nil
	}
}

// load loads the manifest of l into rs: the kept filter if it is that
// manifest's state, else its generations or tables (and exact store).
func (rs *restoring) load(ctx context.Context, l *checkpoint.Loading) error {
	b, m := rs.b, l.Manifest
	rs.dropExact() // an earlier manifest's, that failed verification after loading
	rs.k, rs.reused, rs.loss = nil, nil, restoredLoss{gens: map[int]*bloom.Generation{}, exactGens: map[int]uint64{}}
	if err := b.s.compatible(m); err != nil {
		return err
	}
	var err error
	if rs.seed, err = bloom.ParseSeed(m.HashSeed); err != nil {
		return fmt.Errorf("%w: %w", checkpoint.ErrCorrupt, err)
	}
	// The newest manifest is the last one this process wrote, and the
	// filter is unchanged since: it is that manifest's state.
	if kept := rs.kept; !l.Partial && rs.haveKept && m.Seq == kept.seq && kept.filter.inserts == kept.inserts &&
		kept.filter.k.Config() == bloom.Config(rs.params) && kept.filter.Err() == nil {
		rs.reused = kept.filter
		return nil
	}
	if b.s.fingerprint() {
		return rs.loadTables(ctx, l)
	}
	return rs.loadRing(ctx, l)
}

// loadTables loads a fingerprint filter's tables (and exact store).
func (rs *restoring) loadTables(ctx context.Context, l *checkpoint.Loading) error {
	b, m := rs.b, l.Manifest
	fp, err := b.loadTables(ctx, l, rs.params)
	if err != nil {
		return err
	}
	rs.k = tables{fp}
	if !b.s.exactOn() {
		return nil
	}
	b.s.closeOpen(b.tp, nil)
	for i, ref := range m.Generations {
		if len(ref.ExactGens) > 0 {
			rs.loss.exactGens[i] = ref.ExactGens[len(ref.ExactGens)-1].Gen
		}
	}
	rs.x, err = b.restoreExact(ctx, l, fp, &rs.loss)
	return err
}

// loadRing loads a ring's generations (a lost one empty, if the store
// allows losing it), and the exact store.
func (rs *restoring) loadRing(ctx context.Context, l *checkpoint.Loading) error {
	b, m := rs.b, l.Manifest
	gens := make([]*bloom.Generation, 0, len(m.Generations))
	for i, ref := range m.Generations {
		var g *bloom.Generation
		var err error
		if !ref.IsLost() {
			if g, err = b.loadGeneration(ctx, ref, l.Open); err != nil && (!corrupt(err) || l.Lose(i, err) != nil) {
				return err
			}
		}
		if g == nil { // lost now, or at an earlier restore
			if g, err = emptyGeneration(ref, m, rs.params); err != nil {
				return fmt.Errorf("%w: %s: %w", checkpoint.ErrCorrupt, describe(ref), err)
			}
			rs.loss.gens[i] = g
		}
		rs.loss.exactGens[i] = ref.ExactGen
		gens = append(gens, g)
	}
	sh, err := bloom.RestoreShard(bloom.Config(rs.params), gens)
	if err != nil {
		return err
	}
	// The newest generation's next log continues the chain it was
	// read from; an empty one has no chain, and is stored whole.
	sh.EnableJournal(checkpoint.MaxLogShare, checkpoint.MaxLogEntries)
	for i, g := range gens {
		if rs.loss.gens[i] == nil {
			g.SetJournalMark(m.Generations[i].Tail())
		}
	}
	rs.k = ring{sh}
	if b.s.exactOn() {
		// The directory is this partition's: close whatever store of
		// an earlier session still has it open.
		b.s.closeOpen(b.tp, nil)
		if rs.x, err = b.restoreExact(ctx, l, sh, &rs.loss); err != nil {
			return err
		}
	}
	return nil
}

// restoredOf is what the worker gets of manifest m restored into f.
func restoredOf(m *checkpoint.Manifest, f *filter) *worker.Restored {
	return &worker.Restored{Filter: f, InputOffset: m.InputOffset, OutputOffsets: m.OutputOffsets, Sequence: m.Seq,
		Written: m.CreatedAt, Seed: seedFrom(m.Seed), SeedingUntil: m.SeedingUntil,
		LegacyProvenance: m.Provenance == 0, LegacyBefore: m.LegacyProvenanceBefore, Mark: markFrom(m.InputMark)}
}

func markTo(m *worker.InputMark) *checkpoint.InputMark {
	if m == nil {
		return nil
	}
	return &checkpoint.InputMark{Offset: m.Offset, Timestamp: m.Timestamp, Digest: m.Digest}
}

func markFrom(m *checkpoint.InputMark) *worker.InputMark {
	if m == nil {
		return nil
	}
	return &worker.InputMark{Offset: m.Offset, Timestamp: m.Timestamp, Digest: m.Digest}
}

// corrupt reports whether err is a fault of a generation's stored data: a
// missing or corrupt object or log segment, or a generation or segment
// that does not decode or fit. A generation written by a newer build
// (bloom.ErrUnsupportedVersion) or larger than allowed (bloom.ErrTooLarge)
// is not: losing it would throw away a sound memory.
func corrupt(err error) bool {
	return errors.Is(err, errmark.ErrCorrupt) && !errors.Is(err, bloom.ErrUnsupportedVersion)
}

// loadGeneration decodes the generation object of ref and replays its log
// segments in order. A segment that is missing, corrupt or does not fit
// the base is a corrupt checkpoint: Restore tries the previous manifest.
func (b *handle) loadGeneration(ctx context.Context, ref checkpoint.GenerationRef,
	open func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error),
) (*bloom.Generation, error) {
	rc, err := open(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("opening generation %d: %w", ref.ID, err)
	}
	g, err := bloom.DecodeGeneration(rc, b.s.MaxGenerationBytes)
	if err := verified(rc.Close(), err); err != nil {
		return nil, fmt.Errorf("generation %d: %w", ref.ID, err)
	}
	for i, l := range ref.Log {
		rc, err := open(ctx, l.Ref())
		if err != nil {
			return nil, fmt.Errorf("opening log segment %d of generation %d: %w", i+1, ref.ID, err)
		}
		seg, err := bloom.DecodeLog(rc, checkpoint.MaxLogEntries)
		if err := verified(rc.Close(), err); err != nil {
			return nil, fmt.Errorf("log segment %d of generation %d: %w", i+1, ref.ID, err)
		}
		if err := g.ApplyLog(seg); err != nil {
			return nil, fmt.Errorf("log segment %d (%s): %w", i+1, l.Key, err)
		}
	}
	return g, nil
}

// verified combines the error of closing (verifying) a stored object,
// cerr, with the error of decoding it, err. A stored object that fails its
// checksum explains any decoding error (flipped bytes can read as any
// header, an entry count over the limit included), so that failure is
// returned; a decoding error of an object that verified is the decoder's.
func verified(cerr, err error) error {
	switch {
	case cerr != nil && (err == nil || errors.Is(cerr, errmark.ErrCorrupt)):
		return fmt.Errorf("verifying: %w", cerr)
	case err != nil:
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// notice logs, once per partition, what the restored checkpoint m does not
// say or says differently from this worker's settings: a missing key
// record, another isolation level, another filter plan.
func (b *handle) notice(m *checkpoint.Manifest, params worker.FilterParams, f *filter) {
	log := b.p.Logger().With("seq", m.Seq)
	if m.Key == nil && b.s.Key != (checkpoint.KeyIdentity{}) && b.s.first(b.tp, "key") {
		log.Warn(fmt.Sprintf("checkpoint %d of %s/%d does not record what defines a key (written before key settings were recorded); "+
			"assuming it was written with this worker's %s. If the key settings changed since, the stored keys match none of the new ones "+
			"and duplicates pass for up to a window: restart with the old settings, or start a new memory with on-restore-failure=empty "+
			"or a new group. The next checkpoint records the key settings",
			m.Seq, m.Topic, m.Partition, b.s.Key))
	}
	if m.Isolation != "" && b.s.Isolation != "" && m.Isolation != string(b.s.Isolation) && b.s.first(b.tp, "isolation") {
		// Not refused: switching to read_committed is the usual fix.
		kept := ""
		if m.Isolation == string(worker.ReadUncommitted) {
			kept = " (keys of aborted transactions included)"
		}
		log.Warn(fmt.Sprintf("checkpoint %d of %s/%d was built reading at %s; this worker reads at %s. "+
			"The memory keeps the keys read up to input offset %d%s for their window; the records from there to the committed offset "+
			"are replayed at %s and may not rebuild exactly what was forwarded at %s; everything after is judged at %s",
			m.Seq, m.Topic, m.Partition, m.Isolation, b.s.Isolation, m.InputOffset, kept, b.s.Isolation, m.Isolation, b.s.Isolation),
			"checkpoint_isolation", m.Isolation, "isolation", string(b.s.Isolation))
	}
	old := m.Filter.Params
	if old == params || !b.s.first(b.tp, "plan") {
		return
	}
	var changes []string
	if old.Window != params.Window {
		changes = append(changes, fmt.Sprintf("window %s → %s", humanDuration(old.Window), humanDuration(params.Window)))
	}
	if old.Generations != params.Generations {
		changes = append(changes, fmt.Sprintf("generations %d → %d", old.Generations, params.Generations))
	}
	if old.Capacity != params.Capacity {
		changes = append(changes, fmt.Sprintf("capacity %d → %d", old.Capacity, params.Capacity))
	}
	if old.FPR != params.FPR {
		changes = append(changes, fmt.Sprintf("fpr %g → %g", old.FPR, params.FPR))
	}
	msg := fmt.Sprintf("filter settings changed since checkpoint %d (%s): new generations follow the new settings",
		m.Seq, strings.Join(changes, ", "))
	legacy, last, what := f.k.legacy()
	if legacy > 0 {
		newOnes := "new ones"
		if what != "generations" {
			newOnes = "new generations"
		}
		msg += fmt.Sprintf("; the checkpoint's %d %s of another time span (%s span %s) keep answering lookups until event time passes their end + %s (the last one leaves at %s)",
			legacy, what, newOnes, humanDuration(span(params.Window, params.Generations)), humanDuration(params.Window),
			last.Add(params.Window).UTC().Format(time.RFC3339))
	}
	log.Info(msg)
}

func (b *handle) Claim(ctx context.Context, owner string) error {
	return storeErr(b.p.Claim(ctx, owner))
}

func (b *handle) Commit(ctx context.Context, cp worker.Checkpoint) error {
	sn, ok := cp.Snapshot.(*snapshot)
	if !ok {
		return fmt.Errorf("committing checkpoint: snapshot of type %T is not from this store", cp.Snapshot)
	}
	var ex *checkpoint.ExactCheckpoint
	if sn.exact != nil {
		var err error
		if ex, err = sn.exact.checkpoint(ctx); err != nil {
			return err
		}
	}
	gens := sn.k.stored(sn.exact)
	m, err := b.p.Commit(ctx, checkpoint.Checkpoint{
		InputOffset:   cp.InputOffset,
		OutputOffsets: cp.OutputOffsets,
		Filter:        checkpoint.FilterParams{Kind: manifestKind(b.s.Kind), Params: cp.Params},
		Key:           b.s.keyRecord(),
		HashSeed:      sn.from.seed.String(),
		Isolation:     string(b.s.Isolation),
		Generations:   gens,
		Owner:         cp.Owner,
		EventTime:     sn.frontier,
		Seed:          seedTo(cp.Seed),
		Exact:         ex,
		SeedingUntil:  cp.SeedingUntil,

		Provenance:             1,
		LegacyProvenanceBefore: cp.LegacyBefore,
		InputMark:              markTo(cp.Mark),
		KeysFrom:               sn.keysFrom,
	})
	if err != nil {
		return storeErr(err)
	}
	if cp.Seed == nil {
		// Generations opened from here on get this point; while a seed
		// topic is read, keys of another topic keep coming.
		if kf := sn.k.keysFrom(cp.InputOffset, sn.frontier); kf != nil {
			sn.from.committed.Store(kf)
		}
	}
	sn.k.committed(m)
	b.s.mu.Lock()
	b.s.kept[b.tp] = keptFilter{seq: m.Seq, filter: sn.from, inserts: sn.inserts}
	b.s.mu.Unlock()
	return nil
}

// keyRecord is the Key recorded in manifests (nil while unset, in tests).
func (s *Store) keyRecord() *checkpoint.KeyIdentity {
	if s.Key == (checkpoint.KeyIdentity{}) {
		return nil
	}
	k := s.Key
	return &k
}

// span is the event time one generation covers, as bloom plans it.
func span(window time.Duration, generations int) time.Duration {
	if generations < 2 {
		return window
	}
	g := time.Duration(generations - 1)
	return (window + g - 1) / g
}

// humanDuration writes d as a user would type it ("72h", "1h30m", not
// "72h0m0s"); a part below the minute stays ("8h0m30s").
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func seedFrom(s *checkpoint.SeedProgress) *worker.SeedProgress {
	if s == nil {
		return nil
	}
	return &worker.SeedProgress{Topic: s.Topic, Partition: s.Partition, Next: s.Next, End: s.End}
}

func seedTo(s *worker.SeedProgress) *checkpoint.SeedProgress {
	if s == nil {
		return nil
	}
	return &checkpoint.SeedProgress{Topic: s.Topic, Partition: s.Partition, Next: s.Next, End: s.End}
}

// PlannedBytes is the memory of one partition's filter with every
// generation open at its planned size (overflow stacks not included).
func (s *Store) PlannedBytes(p worker.FilterParams) uint64 {
	if s.fingerprint() {
		return bloom.Config(p).FingerprintPlannedBytes()
	}
	return bloom.Config(p).PlannedBytes()
}

// CheckParams refuses a plan the filter cannot build, saying what it would
// need against the limit of one partition's filter.
func (s *Store) CheckParams(p worker.FilterParams) error {
	validate, bitsPerKey := bloom.Config(p).Validate, bloom.BitsPerKey
	if s.fingerprint() {
		validate, bitsPerKey = bloom.Config(p).ValidateFingerprint, bloom.FingerprintBitsPerKey
	}
	err := validate()
	if err == nil {
		return nil
	}
	need := ""
	if bits, berr := bitsPerKey(p.FPR, p.Generations); berr == nil {
		need = fmt.Sprintf(" of %.1f GiB", float64(p.Capacity)*bits/8/(1<<30))
	}
	return fmt.Errorf("a filter%s; one partition's filter is limited to %d GiB (%w)", need, bloom.MaxFilterBytes>>30, err)
}

// Reused counts the restores served from memory (a filter this process
// checkpointed last and that did not change since).
func (s *Store) Reused() int64 { return s.reuse.Load() }
