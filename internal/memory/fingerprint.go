package memory

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// The fingerprint kind (Store.Kind = KindFingerprint): each partition's
// memory is a bloom.FingerprintShard, checkpointed as one object per table
// in the manifest's generation list (bloom's table format) — the sealed
// tables once, the table taking inserts as a base plus log segments of the
// entries it added (8 bytes each) while its generation lasts, whole again
// after a generation change. The manifest records the kind; a memory of
// one kind restored under the other is refused with ErrIncompatible, naming
// both (docs/filter.md, "Choosing the kind").
//
// Exact mode works as with the ring (exact.go): the shard lists its
// generations as spans, and each table records the exact store's
// generation of every generation it holds (checkpoint.ExactSpan). What the
// ring has and this kind does not (yet): partial restores (a table that fails to load makes its manifest unusable, and an older one
// is tried, as before partial restores: the table is a function of the
// window's keys filed by the same rule, so a rebuild from the input is
// possible in principle, but it is not built).

// Filter kinds (Store.Kind), as `--filter` names them.
const (
	KindRing        = "ring"
	KindFingerprint = "fingerprint"
)

func (s *Store) fingerprint() bool { return s.Kind == KindFingerprint }

// manifestKind is the manifest's record of a kind.
func manifestKind(kind string) string {
	if kind == KindFingerprint {
		return checkpoint.FilterFingerprint
	}
	return checkpoint.FilterRing
}

// kindName names a manifest's kind as the setting does.
func kindName(k string) string {
	if k == checkpoint.FilterFingerprint {
		return KindFingerprint
	}
	return KindRing
}

// objectsName is what the stored objects of a kind are.
func objectsName(k string) string {
	if k == checkpoint.FilterFingerprint {
		return "tables"
	}
	return "generations"
}

// How a table's log chain grows (checkpoint.Generation.LogShare, in place
// of checkpoint.MaxLogShare, the ring's): a table is stored whole again
// once its log segments add up to this share of its base.
const (
	// tableLogShare is the share for a table laid out tagged: a table
	// holds the whole window (about three times the ring's live
	// generation), so at the ring's share a restore at the chain's limit
	// would replay three times the entries; at an eighth it replays as
	// many as the ring's while the table is still uploaded whole less
	// often than the ring's live generation (docs/benchmarks-journal.md, "Crawler
	// scale").
	tableLogShare = 0.125
	// sealedTableLogShare is the share for a table laid out sealed: its
	// log replays into the live table only (the set is read whole), at
	// ~190 ns per entry near the live table's peak load, and its base is
	// small for its entries (13.9 bits each at 1 %), so at an eighth its
	// chain held 4.2 times the ring's entries and restored in 2.07 times
	// the ring's time; at a sixteenth it holds about twice the ring's
	// entries, and the table is still uploaded whole less often than the
	// ring's live generation (docs/benchmarks-journal.md, "The fingerprint
	// filter's sealed layout").
	sealedTableLogShare = 0.0625
)

// TableLogShare is the log share of a table: sealedTableLogShare for a
// table laid out sealed, tableLogShare for a tagged one.
func TableLogShare(sealed bool) float64 {
	if sealed {
		return sealedTableLogShare
	}
	return tableLogShare
}

// tables is the fingerprint kind: a bloom.FingerprintShard, checkpointed
// as one object per table (plus log segments of the one taking inserts).
type tables struct{ *bloom.FingerprintShard }

func (t tables) legacy() (n int, last time.Time, what string) {
	for _, tb := range t.Stats().Tables {
		if tb.Legacy {
			n++
			if tb.End.After(last) {
				last = tb.End
			}
		}
	}
	return n, last, "tables"
}

// keysFrom is nil: the fingerprint kind does not record where its
// generations' keys come from (it has no partial restores to rebuild).
func (tables) keysFrom(offset, frontier int64) *checkpoint.KeysFrom { return nil }

func (t tables) snapshot() (kindSnapshot, *exactSnapshot) {
	return &tablesSnapshot{sn: t.Snapshot()}, nil
}

func (t tables) stats() worker.FilterStats {
	st := t.Stats()
	fs := worker.FilterStats{Bytes: st.Bytes, Fill: st.Load, EstFPR: st.EstFPR, EstKeys: st.Live,
		Generations: st.Generations, OverflowStacks: st.Overflow, Ages: planAges(st)}
	if n := len(st.Tables); n > 0 && !st.Tables[n-1].Legacy {
		fs.Layout = "tagged"
		if st.Tables[n-1].SealedSet {
			fs.Layout = "sealed"
		}
	}
	return fs
}

// planAges is the age histogram of the plan's generations: entries per
// generation over the plan's tables (a table that filled up and the one
// that took over may share one), oldest first.
func planAges(st bloom.FingerprintStats) []uint64 {
	by := map[bloom.Span]uint64{}
	var spans []bloom.Span
	for _, t := range st.Tables {
		if t.Legacy {
			continue
		}
		for i, sp := range t.GenerationSpans() {
			if _, ok := by[sp]; !ok {
				spans = append(spans, sp)
			}
			by[sp] += t.Ages[i]
		}
	}
	slices.SortFunc(spans, func(a, b bloom.Span) int { return cmp.Compare(a.Start, b.Start) })
	ages := make([]uint64, len(spans))
	for i, sp := range spans {
		ages[i] = by[sp]
	}
	return ages
}

// mergeEvery is how many log segments a table's chain takes after its
// last merge point before the next log replaces them (what they added and
// what is new, in one segment). Each entry is then uploaded about twice,
// and a chain holds its base, one segment per mergeEvery checkpoints and
// at most mergeEvery more: it reaches tableLogShare of the base (a whole
// upload) long before checkpoint.MaxLogSegments, so that the table, three
// times the ring's live generation, is uploaded whole as rarely as the
// share allows (docs/checkpoints.md, "Log segments").
const mergeEvery = 16

// tablesSnapshot is a fingerprint snapshot, and which of its tables the
// commit stores with a merged log segment.
type tablesSnapshot struct {
	sn     *bloom.FingerprintSnapshot
	merged []bool
}

func (ts *tablesSnapshot) Release() { ts.sn.Release() }

func (*tablesSnapshot) keysFrom(offset, frontier int64) *checkpoint.KeysFrom { return nil }

// stored is what a commit stores of a fingerprint snapshot: one
// generation entry per table, identified by its serial and the range of
// generations it holds (which moves on at every generation change of the
// table taking inserts: it is then stored whole), with its age histogram;
// the table taking inserts with the log of what it added since its stored
// state, when its journal has it, or since its last merge point every
// mergeEvery segments. merged[i] is set for the latter.
func (ts *tablesSnapshot) stored(ex *exactSnapshot) []checkpoint.Generation {
	sn := ts.sn
	gens := make([]checkpoint.Generation, 0, len(sn.Tables))
	merged := make([]bool, len(sn.Tables))
	for i, t := range sn.Tables {
		st := t.Stats
		cg := checkpoint.Generation{
			ID: t.Serial, Sealed: t.Sealed, Start: st.Start, End: st.End,
			Inserts: st.Adds, EstKeys: st.Live, Fill: st.Load, EstFPR: st.EstFPR, Stacks: st.Level,
			Capacity: st.Capacity, FPR: st.FPR, Ages: st.Ages, LogShare: TableLogShare(st.SealedSet), Source: t,
		}
		if ex != nil {
			for _, sp := range st.GenerationSpans() {
				if g := ex.ids[sp]; g != 0 {
					cg.ExactGens = append(cg.ExactGens, checkpoint.ExactSpan{Start: sp.Start, End: sp.End, Gen: g})
				}
			}
		}
		if mark, ok := t.JournalMark(); ok && !t.Sealed {
			if mark.FromToken != "" && mark.Chain-mark.FromChain >= mergeEvery {
				if l, ok := t.LogSince(mark.From); ok {
					cg.Log = &checkpoint.GenerationLog{After: mark.FromToken, Entries: int64(len(l.Added)), Source: l}
					merged[i] = true
				}
			}
			if l, ok := t.LogSince(mark.Pos); ok && cg.Log == nil {
				cg.Log = &checkpoint.GenerationLog{After: mark.Token, Entries: int64(len(l.Added)), Source: l}
			}
		}
		gens = append(gens, cg)
	}
	ts.merged = merged
	return gens
}

// committed records what the manifest m stores of each table: the
// journal of the table taking inserts may drop what it need not keep, and
// its next log continues the stored chain (a whole upload, or a merged
// segment, is a merge point).
func (ts *tablesSnapshot) committed(m *checkpoint.Manifest) {
	for i, t := range ts.sn.Tables {
		ref := m.Generations[i]
		n := len(ref.Log)
		from := -1
		if mark, ok := t.JournalMark(); ok && mark.FromToken != "" {
			from = mark.FromChain
		}
		switch {
		case n == 0:
			t.MarkMerged(ref.Key, 0)
		case ts.merged[i] && n == from+1:
			t.MarkMerged(ref.Tail(), n)
		default:
			t.Mark(ref.Tail(), n)
		}
	}
}

// loadTables restores the fingerprint shard of the manifest being loaded:
// every table decoded and its log replayed. A table that fails to load
// fails the manifest (no partial restore for this kind).
func (b *handle) loadTables(ctx context.Context, l *checkpoint.Loading, params worker.FilterParams) (*bloom.FingerprintShard, error) {
	m := l.Manifest
	tables := make([]*bloom.Table, 0, len(m.Generations))
	for _, ref := range m.Generations {
		if ref.IsLost() {
			return nil, fmt.Errorf("%w: table %d was lost at an earlier restore", checkpoint.ErrCorrupt, ref.ID)
		}
		tb, err := b.loadTable(ctx, ref, l.Open)
		if err != nil {
			return nil, err
		}
		tables = append(tables, tb)
	}
	fp, err := bloom.RestoreFingerprintShard(bloom.Config(params), tables)
	if err != nil {
		return nil, err
	}
	// The open table's next log continues the chain it was read from.
	fp.EnableJournalShares(tableLogShare, sealedTableLogShare, checkpoint.MaxLogEntries)
	for i, tb := range tables {
		tb.SetJournalMark(m.Generations[i].Tail(), len(m.Generations[i].Log))
	}
	return fp, nil
}

// loadTable decodes the table object of ref and replays its log segments
// (all at once, Table.ApplyLogs). A segment that is missing, corrupt or does not fit the base is
// a corrupt checkpoint: Restore tries the previous manifest.
func (b *handle) loadTable(ctx context.Context, ref checkpoint.GenerationRef,
	open func(context.Context, checkpoint.GenerationRef) (io.ReadCloser, error),
) (*bloom.Table, error) {
	rc, err := open(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("opening table %d: %w", ref.ID, err)
	}
	tb, err := bloom.DecodeTable(rc, b.s.MaxGenerationBytes)
	if err := verified(rc.Close(), err); err != nil {
		return nil, fmt.Errorf("table %d: %w", ref.ID, err)
	}
	segs := make([]*bloom.TableLog, 0, len(ref.Log))
	for i, lr := range ref.Log {
		rc, err := open(ctx, lr.Ref())
		if err != nil {
			return nil, fmt.Errorf("opening log segment %d of table %d: %w", i+1, ref.ID, err)
		}
		seg, err := bloom.DecodeTableLog(rc, checkpoint.MaxLogEntries)
		if err := verified(rc.Close(), err); err != nil {
			return nil, fmt.Errorf("log segment %d of table %d: %w", i+1, ref.ID, err)
		}
		segs = append(segs, seg)
	}
	if err := tb.ApplyLogs(segs); err != nil {
		return nil, fmt.Errorf("log of table %d (%d segments): %w", ref.ID, len(segs), err)
	}
	return tb, nil
}
