package worker

import (
	"cmp"
	"slices"
)

// skipSet is the recovery's skip set: input offsets in [base, limit) whose
// record was already written, with where it was found and, for a dead
// letter, its bloomgate-error reason.
//
// After a long bucket outage and a crash it can hold every record written
// during the outage (hours at tens of thousands of records per second), so
// it is kept compact instead of a map (~50+ bytes per entry). Offsets are
// grouped in chunks of skipChunkSize. A chunk starts sparse: 4 bytes per
// entry, appended in scan order and sorted on first use. Once its sparse
// form would outgrow the dense one it turns dense: 2 bits per offset of the
// chunk (none, output, duplicates, dead letter), plus one byte per offset
// for reasons once the chunk holds a dead letter. So an entry costs at most
// ~4 bytes (20 in a dense chunk with dead letters), and 0.25 bytes when the
// written records are consecutive, the outage case. Chunks are allocated
// only where entries are, so no offset can make the set allocate more than
// one chunk; offsets outside [base, limit) are refused by add.
//
// Reasons are interned: the extraction reasons (KeyReasons) and up to
// skipMaxReasons-1 others; further unknown reasons are stored as "other",
// which the metrics and status count them as anyway (apply).
//
// take is called in input order. Entries of chunks below the chunk of the
// last take can never be taken again and are released with their chunk, so
// memory shrinks as processing moves on and len counts only entries that
// are still reachable.
type skipSet struct {
	base, limit int64
	chunks      map[int64]*skipChunk // by (offset-base) >> skipChunkBits
	cur         int64                // chunk index of the last take; chunks below are released
	curChunk    *skipChunk
	n           int  // live entries, exact unless unsettled
	unsettled   bool // some sparse chunk has unsorted entries; n leaves them out until settle

	reasons   []string // code → reason; 0 is "" (no bloomgate-error header)
	reasonIdx map[string]uint8
}

const (
	skipChunkBits = 16
	skipChunkSize = 1 << skipChunkBits
	// skipDenseAt is the number of sparse entries (4 bytes each) at which a
	// chunk turns dense (2 bits per offset): both take 16 KiB.
	skipDenseAt = skipChunkSize / 16
	// skipMaxReasons bounds the intern table (codes are one byte).
	skipMaxReasons = 256
)

// A skipChunk is sparse (ents) or dense (kinds), never both.
type skipChunk struct {
	// Sparse: lo<<16 | reason<<8 | kind code, lo the offset within the
	// chunk; sorted by lo when sorted is set; a taken entry has code 0.
	ents   []uint32
	sorted bool
	// Dense: 2-bit kind codes, 4 offsets per byte; reasons (per offset)
	// allocated with the chunk's first dead letter of a non-empty reason.
	kinds   []byte
	reasons []uint8
	n       int // live entries (sparse: exact when sorted)
}

// Kind codes: 0 is "not in the set".
func kindCode(k writtenKind) uint32 { return uint32(k) + 1 }

func newSkipSet(base, limit int64) *skipSet {
	s := &skipSet{base: base, limit: limit, chunks: map[int64]*skipChunk{},
		reasons: []string{""}, reasonIdx: map[string]uint8{"": 0}}
	for _, r := range KeyReasons {
		s.intern(r)
	}
	return s
}

func (s *skipSet) intern(reason string) uint8 {
	if i, ok := s.reasonIdx[reason]; ok {
		return i
	}
	if len(s.reasons) == skipMaxReasons {
		return s.reasonIdx["other"]
	}
	i := uint8(len(s.reasons))
	s.reasons = append(s.reasons, reason)
	s.reasonIdx[reason] = i
	return i
}

// add records that the record at input offset off was found written. A
// later add of the same offset replaces the earlier one. It reports false,
// storing nothing, for an offset outside [base, limit).
func (s *skipSet) add(off int64, e skipEntry) bool {
	if off < s.base || off >= s.limit {
		return false
	}
	ci := (off - s.base) >> skipChunkBits
	if ci < s.cur {
		return false // released: processing is past it
	}
	c := s.chunks[ci]
	if c == nil {
		c = &skipChunk{sorted: true}
		s.chunks[ci] = c
		if ci == s.cur {
			s.curChunk = c
		}
	}
	lo := uint32((off - s.base) & (skipChunkSize - 1))
	var r uint8
	if e.kind == toDeadLetter {
		r = s.intern(e.reason)
	}
	code := kindCode(e.kind)
	if c.kinds != nil {
		s.n += c.setDense(lo, code, r)
		return true
	}
	v := lo<<16 | uint32(r)<<8 | code
	switch last := len(c.ents) - 1; {
	case !c.sorted:
	case last >= 0 && c.ents[last]>>16 == lo:
		if c.ents[last]&0xff == 0 { // taken before
			c.n++
			s.n++
		}
		c.ents[last] = v
		return true
	case last >= 0 && c.ents[last]>>16 > lo:
		// Counted again by settle.
		s.n -= c.n
		c.n, c.sorted, s.unsettled = 0, false, true
	default:
		c.n++
		s.n++
	}
	c.ents = append(c.ents, v)
	if len(c.ents) >= skipDenseAt {
		s.n += c.densify()
	}
	return true
}

// setDense stores code and reason at lo and returns 1 if lo was empty.
func (c *skipChunk) setDense(lo, code uint32, reason uint8) int {
	i, sh := lo>>2, (lo&3)*2
	old := uint32(c.kinds[i]>>sh) & 3
	c.kinds[i] = c.kinds[i]&^(3<<sh) | byte(code)<<sh
	if reason != 0 && c.reasons == nil {
		c.reasons = make([]uint8, skipChunkSize)
	}
	if c.reasons != nil {
		c.reasons[lo] = reason
	}
	if old != 0 {
		return 0
	}
	c.n++
	return 1
}

// densify turns a sparse chunk dense and returns the change of its count
// (an unsorted chunk counts 0 until then).
func (c *skipChunk) densify() int {
	before := c.n
	ents := c.ents
	c.ents, c.sorted, c.n = nil, false, 0
	c.kinds = make([]byte, skipChunkSize/4)
	for _, v := range ents { // in add order: the last add of an offset wins
		if code := v & 0xff; code != 0 {
			c.setDense(v>>16, code, uint8(v>>8))
		}
	}
	return c.n - before
}

// settle sorts the unsorted sparse chunks, keeping the last add of an
// offset, and makes n exact.
func (s *skipSet) settle() {
	if !s.unsettled {
		return
	}
	for _, c := range s.chunks {
		if c.kinds != nil || c.sorted {
			continue
		}
		// Stable: entries of one offset stay in add order.
		slices.SortStableFunc(c.ents, func(a, b uint32) int { return cmp.Compare(a>>16, b>>16) })
		out := c.ents[:0]
		for _, v := range c.ents {
			if k := len(out) - 1; k >= 0 && out[k]>>16 == v>>16 {
				out[k] = v
				continue
			}
			out = append(out, v)
		}
		live := out[:0]
		for _, v := range out {
			if v&0xff != 0 {
				live = append(live, v)
			}
		}
		c.ents, c.sorted, c.n = live, true, len(live)
		s.n += len(live)
	}
	s.unsettled = false
}

// take removes and returns the entry of offset off. Offsets must not
// decrease from one call to the next (input order): a take moving to a
// later chunk releases the chunks below it, with whatever they still hold.
func (s *skipSet) take(off int64) (skipEntry, bool) {
	if s == nil || off < s.base || off >= s.limit {
		return skipEntry{}, false
	}
	s.settle()
	ci := (off - s.base) >> skipChunkBits
	if ci < s.cur {
		return skipEntry{}, false
	}
	if ci > s.cur {
		s.advance(ci)
	}
	c := s.curChunk
	if c == nil {
		return skipEntry{}, false
	}
	lo := uint32((off - s.base) & (skipChunkSize - 1))
	var code uint32
	var r uint8
	if c.kinds != nil {
		i, sh := lo>>2, (lo&3)*2
		code = uint32(c.kinds[i]>>sh) & 3
		if code == 0 {
			return skipEntry{}, false
		}
		c.kinds[i] &^= 3 << sh
		if c.reasons != nil {
			r = c.reasons[lo]
		}
	} else {
		i, found := slices.BinarySearchFunc(c.ents, lo, func(v, lo uint32) int { return cmp.Compare(v>>16, lo) })
		if !found || c.ents[i]&0xff == 0 {
			return skipEntry{}, false
		}
		code, r = c.ents[i]&0xff, uint8(c.ents[i]>>8)
		c.ents[i] &^= 0xff
	}
	c.n--
	s.n--
	if c.n == 0 {
		delete(s.chunks, ci)
		s.curChunk = nil
	}
	e := skipEntry{kind: writtenKind(code - 1)}
	if e.kind == toDeadLetter {
		e.reason = s.reasons[r]
	}
	return e, true
}

// advance releases the chunks below ci and makes ci the current chunk.
func (s *skipSet) advance(ci int64) {
	drop := func(k int64) {
		if c := s.chunks[k]; c != nil {
			s.n -= c.n
			delete(s.chunks, k)
		}
	}
	if ci-s.cur <= int64(len(s.chunks)) {
		for k := s.cur; k < ci; k++ {
			drop(k)
		}
	} else {
		for k := range s.chunks {
			if k < ci {
				drop(k)
			}
		}
	}
	s.cur, s.curChunk = ci, s.chunks[ci]
}

// len is the number of entries that take can still return.
func (s *skipSet) len() int {
	if s == nil {
		return 0
	}
	s.settle()
	return s.n
}

// writtenKind says where a scanned record was found.
type writtenKind uint8

const (
	toOutput writtenKind = iota
	toDuplicates
	toDeadLetter
)

type skipEntry struct {
	kind   writtenKind
	reason string // bloomgate-error of a dead-lettered record
}
