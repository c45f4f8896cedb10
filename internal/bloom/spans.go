package bloom

import "time"

// Span identifies one generation of a shard: its event-time range
// [Start, End) in Unix ns. No two generations of a shard share a span:
// ring generations are distinct spans of the plan's length, legacy ones
// have another length (RestoreShard refuses two with the same range). A
// generation ID alone is not enough after a change of plan, where a legacy
// generation and a ring generation may have the same span index.
type Span struct{ Start, End int64 }

// Spans appends the spans of the shard's generations in lookup order,
// legacy generations first, then the ring oldest first: the last is the
// generation TestAndAdd adds to. They change only in calls for which
// Changes reports true.
func (s *Shard) Spans(dst []Span) []Span {
	for _, gs := range [2][]*Generation{s.legacy, s.gens} {
		for _, g := range gs {
			dst = append(dst, Span{g.start, g.end})
		}
	}
	return dst
}

// Changes reports whether TestAndAdd, TestAndAddBatch or Advance with
// timestamp ts would open or drop a generation: the conditions TestAndAdd
// checks before it tests. Calls with timestamps for which it reports false
// leave Spans as it is, so a caller that keeps data per generation (an
// exact store behind the filter) can batch such calls and handle the
// others one by one.
func (s *Shard) Changes(ts time.Time) bool {
	ns := ts.UnixNano()
	if ns >= s.legacyUntil {
		return true
	}
	n := len(s.gens)
	return n == 0 || s.spanIndex(ns) > s.gens[n-1].id
}

// Matching appends the positions, in Spans' order, of the generations whose
// filters report h as present, newest first. The newest generation is
// among them after a TestAndAdd of h. Since a Bloom filter has no false
// negatives, every generation that really holds h is listed; the others
// are its false positives. Cost: one probe per generation (no early exit).
func (s *Shard) Matching(h Hash, dst []int) []int {
	nl := len(s.legacy)
	for i := len(s.gens) - 1; i >= 0; i-- {
		if s.gens[i].test(h) {
			dst = append(dst, nl+i)
		}
	}
	for i := nl - 1; i >= 0; i-- {
		if s.legacy[i].test(h) {
			dst = append(dst, i)
		}
	}
	return dst
}

// Newest is the span and index of the ring's newest generation (the one
// TestAndAdd adds to); ok is false while the ring is empty (a new shard,
// or one restored under another plan before its first timestamp).
func (s *Shard) Newest() (sp Span, id uint64, ok bool) {
	n := len(s.gens)
	if n == 0 {
		return Span{}, 0, false
	}
	g := s.gens[n-1]
	return Span{g.start, g.end}, g.id, true
}

// SpanIndex is the index of the span of length span (ns) that holds the
// event time ns, as the shard numbers its generations: ⌊ns / span⌋, and 0
// for times before the Unix epoch.
func SpanIndex(ns, span int64) uint64 {
	if ns < 0 || span <= 0 {
		return 0
	}
	return uint64(ns / span)
}
