package bloom

import "sync/atomic"

// A journal records the hashes that set bits in a generation, so that a
// checkpoint can store what changed since the previous one instead of the
// whole generation (log.go has the segment format). Replaying the entries
// into the same sub-filter of the earlier state gives the same bits: Bloom
// inserts are idempotent and commute.
//
// Positions count the entries ever appended to the generation's journal.
// The owner appends and drops; a snapshot keeps a view of the entries
// [start, end) it saw; a committer records, from any goroutine, the
// position its checkpoint covered (mark), and the owner drops the entries
// before it at its next snapshot. Entries the owner gives up (over the
// limit, or when the generation's structure changes: a new sub-filter, or
// saturation) leave a gap: a log that needs them cannot be written, and the
// next checkpoint stores the generation whole.
//
// The entries are the hashes of a generation (journal) or a tagged table's
// packed entries (tableJournal).
type journalOf[E any] struct {
	// Entries live in fixed chunks, so that appending never copies and a
	// snapshot shares them: the owner only writes past the end a snapshot
	// saw, and drops whole chunks. chunks[0][0] is position base; the
	// entries held are [start, end).
	chunks     []*[journalChunkLen]E
	base       uint64
	start, end uint64
	limit      uint64 // entries held at most

	mark atomic.Pointer[JournalMark] // set by the committer
}

type (
	journal      = journalOf[Hash]
	tableJournal = journalOf[uint64]
)

// journalChunkLen entries (64 KiB of hashes) per chunk.
const journalChunkLen = 4096

// JournalMark is the journal position a stored checkpoint covers, and an
// opaque token naming that stored state (the checkpoint layer's chain tail).
type JournalMark struct {
	Pos   uint64
	Token string
	// Chain is the number of log segments of the stored chain (tables).
	Chain int
	// From, FromToken and FromChain name a merge point (tables): a stored
	// state of the chain — the table stored whole, or a segment that
	// replaced the segments before it — after which a log since From may
	// replace the chain's later segments. The journal keeps the entries
	// since From. FromToken "": none.
	From      uint64
	FromToken string
	FromChain int
}

// keep is the first position a mark needs kept.
func (m *JournalMark) keep() uint64 {
	if m.FromToken != "" {
		return min(m.Pos, m.From)
	}
	return m.Pos
}

// add appends h. Over the limit it first drops what a commit covered, and
// if that is not enough gives up every entry.
func (j *journalOf[E]) add(h E) {
	if j.end-j.start >= j.limit {
		j.trim()
		if j.end-j.start >= j.limit {
			j.reset()
		}
	}
	i := j.end - j.base
	if i/journalChunkLen == uint64(len(j.chunks)) {
		j.chunks = append(j.chunks, new([journalChunkLen]E))
	}
	j.chunks[i/journalChunkLen][i%journalChunkLen] = h
	j.end++
}

// reset gives up the entries held: a log reaching back before end cannot
// be written.
func (j *journalOf[E]) reset() {
	j.chunks = nil
	j.base, j.start = j.end, j.end
}

// restart gives up the entries and every position before now: no log can
// continue a state marked before it (the table's identity changed).
func (j *journalOf[E]) restart() {
	j.end++
	j.reset()
}

// trim drops the entries a commit covered.
func (j *journalOf[E]) trim() {
	m := j.mark.Load()
	if m == nil {
		return
	}
	switch keep := m.keep(); {
	case keep <= j.start:
	case keep >= j.end:
		j.reset()
	default:
		k := (keep - j.base) / journalChunkLen
		// A new array of pointers: a snapshot may hold the old one, and
		// the dropped chunks are freed once no snapshot does.
		j.chunks = append([]*[journalChunkLen]E(nil), j.chunks[k:]...)
		j.base += k * journalChunkLen
		j.start = keep
	}
}

// journalLimit is the number of entries a journal of a generation of
// genBytes holds: share of its size at entrySize bytes per entry, at most
// maxEntries, at least 1024.
func journalLimit(genBytes uint64, share float64, maxEntries int, entrySize int) uint64 {
	n := int(float64(genBytes) * share / float64(entrySize))
	return uint64(max(min(n, maxEntries), 1024))
}

// EnableJournal makes the shard record, per ring generation, the hashes
// that set bits (see GenerationSnapshot.LogSince): generations opened from
// now on and the newest one it holds (the others never change again). A journal holds at most share of its
// generation's bitset size in entries (16 bytes each) and at most
// maxEntries; more than that gives up the log until the next whole upload.
// Cost: one predictable branch per insert while off, an append per new key
// while on. Only the owning goroutine may call it.
func (s *Shard) EnableJournal(share float64, maxEntries int) {
	s.journal = &journalPlan{share: share, maxEntries: maxEntries}
	if n := len(s.gens); n > 0 && s.gens[n-1].j == nil {
		s.gens[n-1].startJournal(s.journal)
	}
}

// journalPlan is how a shard sizes the journals of its generations.
type journalPlan struct {
	share       float64
	sealedShare float64 // for a fingerprint table laid out sealed
	maxEntries  int
}

func (g *Generation) startJournal(p *journalPlan) {
	g.jplan = p
	g.j = &journal{limit: journalLimit(g.bytes(), p.share, p.maxEntries, logEntrySize)}
}

// invalidateJournal gives up the journal after a structure change (a new
// sub-filter or saturation): the entries before it cannot be replayed
// against the new structure.
func (g *Generation) invalidateJournal() {
	if g.j == nil {
		return
	}
	g.j.reset()
	g.j.limit = journalLimit(g.bytes(), g.jplan.share, g.jplan.maxEntries, logEntrySize)
}

func (g *Generation) bytes() uint64 {
	var n uint64
	for _, f := range g.subs {
		n += f.Bytes()
	}
	return n
}

// SetJournalMark records that the generation's current state is stored
// under token (after a restore: the chain the generation was read from).
// No-op without a journal. Only the owning goroutine may call it.
func (g *Generation) SetJournalMark(token string) {
	if g.j != nil {
		g.j.mark.Store(&JournalMark{Pos: g.j.end, Token: token})
	}
}

// journalViewOf is what a snapshot keeps of a journal: O(chunks) pointers.
type journalViewOf[E any] struct {
	j                *journalOf[E]
	chunks           []*[journalChunkLen]E
	base, start, end uint64
}

type journalView = journalViewOf[Hash]

func (j *journalOf[E]) view() journalViewOf[E] {
	j.trim()
	return journalViewOf[E]{j: j, chunks: append([]*[journalChunkLen]E(nil), j.chunks...), base: j.base, start: j.start, end: j.end}
}

// entries copies the entries [from, v.end).
func (v *journalViewOf[E]) entries(from uint64) []E {
	out := make([]E, 0, v.end-from)
	for p := from; p < v.end; {
		i := p - v.base
		c := v.chunks[i/journalChunkLen][i%journalChunkLen:]
		c = c[:min(uint64(len(c)), v.end-p)]
		out = append(out, c...)
		p += uint64(len(c))
	}
	return out
}

// JournalMark is the mark the committer last recorded (Mark), or that the
// restore set; ok is false when the generation keeps no journal or nothing
// was marked yet. Safe from any goroutine.
func (gs *GenerationSnapshot) JournalMark() (m JournalMark, ok bool) {
	if gs.journal.j == nil {
		return JournalMark{}, false
	}
	p := gs.journal.j.mark.Load()
	if p == nil {
		return JournalMark{}, false
	}
	return *p, true
}

// LogSince returns the log segment of the entries from journal position
// pos to the snapshot, or false if the journal no longer holds all of them
// (given up after a structure change or over its limit) or there is no
// journal. Replaying the segment onto the generation as it was at pos
// gives the generation as it is in the snapshot.
func (gs *GenerationSnapshot) LogSince(pos uint64) (*LogSegment, bool) {
	v := gs.journal
	if v.j == nil || pos < v.start || pos > v.end {
		return nil, false
	}
	sub := len(gs.views) - 1
	return &LogSegment{
		ID: gs.meta.id, Start: gs.meta.start, End: gs.meta.end,
		Sub: uint32(sub), Subs: uint32(len(gs.views)),
		Inserts: gs.meta.inserts, SubInserts: gs.meta.subInserts[sub], SetBits: gs.views[sub].ones,
		Entries: v.entries(pos),
	}, true
}

// Mark records that the snapshot's state is stored under token: the
// generation's journal may drop the entries up to the snapshot, and the
// next LogSince starts from there. Call it only once that state is
// durable (a commit succeeded). Safe from any goroutine.
func (gs *GenerationSnapshot) Mark(token string) {
	if gs.journal.j != nil {
		gs.journal.j.mark.Store(&JournalMark{Pos: gs.journal.end, Token: token})
	}
}
