package bloom

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// TableStats describes one table of a fingerprint shard.
type TableStats struct {
	Serial        uint64    // the table's identity in the memory
	First, Newest uint64    // generations it holds (span indexes)
	Start, End    time.Time // [start of First, end of Newest)
	Level         int       // 0: the plan's size; L: 2^L times it (overflow)
	Entries       uint64    // entries held, expired ones of a closed table included
	Live          uint64    // entries of generations still in the window
	Adds          uint64    // entries added over its life
	// Load is entries / home slots: of the live table (the newest
	// generation's) in a sealed table.
	Load     float64
	EstFPR   float64 // from its live entries
	Bytes    uint64
	Capacity uint64  // entries it takes before it closes
	FPR      float64 // its rate at capacity
	// Ages is the age histogram: entries per generation still answering
	// lookups, oldest first (the last is Newest).
	Ages   []uint64
	Closed bool // takes no inserts: unchanged until its generations leave
	Legacy bool // written under a plan with another span or G
	// SealedSet: the generations before Newest are in a static set beside a
	// live table of the newest (sealed.go); Capacity is the whole table's,
	// Load the live table's.
	SealedSet bool
}

// FingerprintStats describes a fingerprint shard: per table (legacy ones
// first, then the plan's oldest first) and totals.
type FingerprintStats struct {
	Tables      []TableStats
	Legacy      int // tables of an earlier plan
	Overflow    int // tables above level 0
	Entries     uint64
	Live        uint64
	Bytes       uint64
	Generations int     // generations of the plan in the window
	Load        float64 // of the table taking inserts
	EstFPR      float64 // estimated rate of a lookup over all tables
}

// Stats computes the table's statistics; cost O(tags).
func (tb *Table) Stats() TableStats {
	st := TableStats{
		Serial: tb.serial, First: tb.first, Newest: tb.newest,
		Start: time.Unix(0, int64(tb.first)*tb.span).UTC(), End: time.Unix(0, int64(tb.newest+1)*tb.span).UTC(),
		Level: tb.size.level, Entries: tb.entries(), Live: tb.liveEntries(), Adds: tb.adds,
		Load: float64(tb.q.entries) / float64(tb.q.slots()), EstFPR: tb.estFPR(), Bytes: tb.bytes(),
		Capacity: tb.size.capacity, FPR: tb.size.fpr, Closed: tb.closed, SealedSet: tb.h != nil,
	}
	if tb.live != 0 {
		for g := tb.liveLo; g <= tb.newest; g++ {
			st.Ages = append(st.Ages, tb.counts[tb.tag(g)])
		}
	}
	return st
}

// Stats computes the shard's statistics; cost O(tables × tags).
func (s *FingerprintShard) Stats() FingerprintStats {
	st := FingerprintStats{Legacy: len(s.legacy)}
	pass := 1.0
	for i, ts := range [2][]*Table{s.legacy, s.tables} {
		for _, tb := range ts {
			t := tb.Stats()
			t.Legacy = i == 0
			st.Tables = append(st.Tables, t)
			st.Entries += t.Entries
			st.Live += t.Live
			st.Bytes += t.Bytes
			if t.Level > 0 {
				st.Overflow++
			}
			pass *= 1 - t.EstFPR
		}
	}
	st.EstFPR = 1 - pass
	if s.started {
		st.Generations = int(min(s.t-s.spansFrom()+1, uint64(s.plan.gens)))
	}
	if tb := s.open(); tb != nil {
		st.Load = float64(tb.q.entries) / float64(tb.q.slots())
	}
	return st
}

// FingerprintSnapshot is a consistent, copy-on-write view of a fingerprint
// shard (see Snapshot): release it when done.
type FingerprintSnapshot struct {
	Config Config
	Tables []*TableSnapshot // legacy first, then the plan's oldest first
	once   sync.Once
}

// TableSnapshot is one table frozen at snapshot time.
type TableSnapshot struct {
	Serial  uint64
	Sealed  bool // closed or legacy: never changes again
	Stats   TableStats
	meta    tableMeta
	view    qtableView
	set     *sealedSet // a sealed table's set as it was (chunks never change)
	journal journalViewOf[uint64]
}

// tableMeta is what the format records about a table beside its pages.
type tableMeta struct {
	serial, first, newest uint64
	span                  int64
	gens                  int
	size                  tableSize
	a                     uint
	entries, adds         uint64
	counts                []uint64
	closed                bool
}

func (tb *Table) meta() tableMeta {
	return tableMeta{
		serial: tb.serial, first: tb.first, newest: tb.newest, span: tb.span, gens: tb.gens, size: tb.size, a: tb.a,
		entries: tb.q.entries, adds: tb.adds, counts: slices.Clone(tb.counts), closed: tb.closed,
	}
}

// Snapshot freezes the shard: legacy tables first, then the plan's, oldest
// first. Only the owning goroutine may call it.
func (s *FingerprintShard) Snapshot() *FingerprintSnapshot {
	sn := &FingerprintSnapshot{Config: s.cfg}
	for i, ts := range [2][]*Table{s.legacy, s.tables} {
		for _, tb := range ts {
			st := tb.Stats()
			st.Legacy = i == 0
			ts := &TableSnapshot{Serial: tb.serial, Sealed: tb.closed || i == 0, Stats: st, meta: tb.meta(), view: tb.q.snapshot()}
			if tb.h != nil {
				ts.set = tb.h.set.frozen()
			}
			if tb.j != nil {
				ts.journal = tb.j.view()
			}
			sn.Tables = append(sn.Tables, ts)
		}
	}
	return sn
}

// Release lets the owner write in place again. Safe to call more than once
// and from any goroutine; the snapshot must not be encoded afterwards.
func (sn *FingerprintSnapshot) Release() {
	sn.once.Do(func() {
		for _, t := range sn.Tables {
			t.view.release()
		}
	})
}

// RestoreFingerprintShard rebuilds a shard from decoded tables (any order);
// the shard takes ownership of them.
//
// A table of cfg's span and generation count belongs to the plan: the
// newest by serial keeps taking inserts if it was open, the others are
// closed; its own size and rate are kept (a capacity or rate change
// applies from the next generation change on, when a table of the new plan
// opens). Any other table was written under another window or generation
// count: it becomes a legacy table, answering for each of its generations
// until event time reaches the generation's end + cfg.Window, never
// inserted into. Tables the shard would already have dropped are ignored.
//
// The result depends only on the tables and cfg.
func RestoreFingerprintShard(cfg Config, tables []*Table) (*FingerprintShard, error) {
	s, err := NewFingerprintShard(cfg)
	if err != nil {
		return nil, err
	}
	if slices.Contains(tables, nil) {
		return nil, errors.New("restoring shard: nil table")
	}
	tables = slices.Clone(tables)
	slices.SortFunc(tables, func(a, b *Table) int { return cmp.Compare(a.serial, b.serial) })
	for i := 1; i < len(tables); i++ {
		if tables[i-1].serial == tables[i].serial {
			return nil, fmt.Errorf("restoring shard: table %d given twice", tables[i].serial)
		}
	}
	g := uint64(s.plan.gens)
	for _, tb := range tables {
		s.serial = max(s.serial, tb.serial)
		if tb.span == s.plan.span && tb.gens == s.plan.gens {
			s.tables = append(s.tables, tb)
			s.t = max(s.t, tb.newest)
		} else {
			tb.closed, tb.j = true, nil
			s.legacy = append(s.legacy, tb)
		}
	}
	if len(s.tables) > 0 {
		s.started = true
		s.first = s.tables[0].first
		for _, tb := range s.tables {
			s.first = min(s.first, tb.first)
		}
		for i, tb := range s.tables {
			if i < len(s.tables)-1 || tb.newest != s.t {
				tb.closed, tb.j = true, nil
			}
		}
		s.tables = slices.DeleteFunc(s.tables, func(tb *Table) bool { return tb.closed && tb.newest+g <= s.t })
		lo := uint64(0)
		if s.t >= g {
			lo = s.t - g + 1
		}
		for _, tb := range s.tables {
			tb.setLive(lo)
		}
	}
	slices.SortFunc(s.legacy, func(a, b *Table) int {
		return cmp.Or(cmp.Compare(int64(a.newest+1)*a.span, int64(b.newest+1)*b.span), cmp.Compare(a.serial, b.serial))
	})
	var start int64 // the newest plan generation's start
	if s.started {
		start = int64(s.t) * s.plan.span
	}
	keep := s.legacy[:0]
	for _, tb := range s.legacy {
		lo := tb.first
		if tb.newest+1 > uint64(tb.gens) {
			lo = max(lo, tb.newest+1-uint64(tb.gens))
		}
		tb.setLive(lo)
		if addSat(int64(tb.newest+1)*tb.span, int64(cfg.Window)) > start {
			keep = append(keep, tb)
		}
	}
	s.legacy = keep
	if len(s.legacy) > 0 {
		s.legacyUntil = math.MinInt64 // recomputed at the first event
	}
	return s, nil
}

// SetJournalMark records that the table's current state is stored under
// token, at the end of a chain of chain log segments (after a restore: the
// chain the table was read from); that state is a merge point. No-op
// without a journal. Only the owning goroutine may call it.
func (tb *Table) SetJournalMark(token string, chain int) {
	if tb.j != nil {
		tb.j.mark.Store(&JournalMark{Pos: tb.j.end, Token: token, Chain: chain, From: tb.j.end, FromToken: token, FromChain: chain})
	}
}

// spansFrom is the oldest generation of the plan in the window: G before
// the newest, or the first the plan's tables held.
func (s *FingerprintShard) spansFrom() uint64 {
	lo := s.first
	if g := uint64(s.plan.gens); s.t+1 > g {
		lo = max(lo, s.t+1-g)
	}
	return lo
}

// Tables lists the shard's tables: legacy first, then the plan's oldest
// first (the last takes inserts unless closed).
func (s *FingerprintShard) Tables() []*Table {
	return append(slices.Clone(s.legacy), s.tables...)
}

// Serial is the table's identity in its memory.
func (tb *Table) Serial() uint64 { return tb.serial }

// JournalMark is the mark the committer last recorded (Mark) or the
// restore set; ok is false without a journal or before any mark. Safe from
// any goroutine.
func (ts *TableSnapshot) JournalMark() (m JournalMark, ok bool) {
	if ts.journal.j == nil {
		return JournalMark{}, false
	}
	p := ts.journal.j.mark.Load()
	if p == nil {
		return JournalMark{}, false
	}
	return *p, true
}

// LogSince returns the log segment of the entries the table added from
// journal position pos to the snapshot, or false if the journal no longer
// holds all of them (or there is none). Replaying it onto the table as it
// was at pos gives the table as it is in the snapshot.
func (ts *TableSnapshot) LogSince(pos uint64) (*TableLog, bool) {
	v := ts.journal
	if v.j == nil || pos < v.start || pos > v.end {
		return nil, false
	}
	m := ts.meta
	return &TableLog{Serial: m.serial, First: m.first, Newest: m.newest, Entries: m.entries, Adds: m.adds,
		Added: v.entries(pos)}, true
}

// Mark records that the snapshot's state is stored under token at the end
// of a chain of chain segments, continuing the chain (the merge point
// stays): the journal may drop the entries before the merge point. Call
// it only once that state is durable. Safe from any goroutine.
func (ts *TableSnapshot) Mark(token string, chain int) {
	if j := ts.journal.j; j != nil {
		m := JournalMark{Pos: ts.journal.end, Token: token, Chain: chain}
		if p := j.mark.Load(); p != nil && p.FromChain <= chain {
			m.From, m.FromToken, m.FromChain = p.From, p.FromToken, p.FromChain
		}
		j.mark.Store(&m)
	}
}

// MarkMerged records that the snapshot's state is stored under token at
// the end of a chain of chain segments and is a merge point: the table
// stored whole (chain 0), or a segment that replaced the segments after
// the previous merge point.
func (ts *TableSnapshot) MarkMerged(token string, chain int) {
	if j := ts.journal.j; j != nil {
		e := ts.journal.end
		j.mark.Store(&JournalMark{Pos: e, Token: token, Chain: chain, From: e, FromToken: token, FromChain: chain})
	}
}
