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

// config is the filter's plan.
func (f *filter) config() bloom.Config {
	if f.fp != nil {
		return f.fp.Config()
	}
	return f.s.Config()
}

// legacy reports the generations (tables) of another plan the filter
// still holds, the end of the last one, and what they are.
func (f *filter) legacy() (n int, last time.Time, what string) {
	if f.fp != nil {
		for _, t := range f.fp.Stats().Tables {
			if t.Legacy {
				n++
				if t.End.After(last) {
					last = t.End
				}
			}
		}
		return n, last, "tables"
	}
	st := f.s.Stats()
	for _, g := range st.Generations {
		if g.Legacy && g.End.After(last) {
			last = g.End
		}
	}
	return st.Legacy, last, "generations"
}

func (f *filter) fingerprintStats() worker.FilterStats {
	st := f.fp.Stats()
	fs := worker.FilterStats{Bytes: st.Bytes, Fill: st.Load, EstFPR: st.EstFPR, EstKeys: st.Live,
		Generations: st.Generations, OverflowStacks: st.Overflow, ClampedTimestamps: f.clamped, Ages: planAges(st)}
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

// snapshotGenerations lists a ring snapshot's generations (none for nil).
func snapshotGenerations(sn *bloom.Snapshot) []*bloom.GenerationSnapshot {
	if sn == nil {
		return nil
	}
	return sn.Generations
}

// mergeEvery is how many log segments a table's chain takes after its
// last merge point before the next log replaces them (what they added and
// what is new, in one segment). Each entry is then uploaded about twice,
// and a chain holds its base, one segment per mergeEvery checkpoints and
// at most mergeEvery more: it reaches TableLogShare of the base (a whole
// upload) long before checkpoint.MaxLogSegments, so that the table, three
// times the ring's live generation, is uploaded whole as rarely as the
// share allows (docs/checkpoints.md, "Log segments").
const mergeEvery = 16

// tablesOf is what a commit stores of a fingerprint snapshot: one
// generation entry per table, identified by its serial and the range of
// generations it holds (which moves on at every generation change of the
// table taking inserts: it is then stored whole), with its age histogram;
// the table taking inserts with the log of what it added since its stored
// state, when its journal has it, or since its last merge point every
// mergeEvery segments. merged[i] is set for the latter.
func tablesOf(sn *bloom.FingerprintSnapshot, ex *exactSnapshot) (gens []checkpoint.Generation, merged []bool) {
	gens = make([]checkpoint.Generation, 0, len(sn.Tables))
	merged = make([]bool, len(sn.Tables))
	for i, t := range sn.Tables {
		st := t.Stats
		cg := checkpoint.Generation{
			ID: t.Serial, Sealed: t.Sealed, Start: st.Start, End: st.End,
			Inserts: st.Adds, EstKeys: st.Live, Fill: st.Load, EstFPR: st.EstFPR, Stacks: st.Level,
			Capacity: st.Capacity, FPR: st.FPR, Ages: st.Ages, LogShare: checkpoint.TableShare(st.SealedSet), Source: t,
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
	return gens, merged
}

// markTables records what the manifest m stores of each table of sn: the
// journal of the table taking inserts may drop what it need not keep, and
// its next log continues the stored chain (a whole upload, or a merged
// segment, is a merge point).
func markTables(sn *bloom.FingerprintSnapshot, merged []bool, m *checkpoint.Manifest) {
	for i, t := range sn.Tables {
		ref := m.Generations[i]
		n := len(ref.Log)
		from := -1
		if mark, ok := t.JournalMark(); ok && mark.FromToken != "" {
			from = mark.FromChain
		}
		switch {
		case n == 0:
			t.MarkMerged(ref.Key, 0)
		case merged[i] && n == from+1:
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
	fp.EnableJournalShares(checkpoint.TableLogShare, checkpoint.SealedTableLogShare, checkpoint.MaxLogEntries)
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
