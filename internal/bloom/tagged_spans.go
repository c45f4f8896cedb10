package bloom

import (
	"cmp"
	"math/bits"
	"slices"
	"time"
)

// The generations of a fingerprint shard as spans (the ring's Spans,
// Changes and Matching), for a caller that keeps data per generation: the
// exact store of exact mode. A generation of the plan is one span of the
// plan's length, whichever tables hold its entries (a closed table and the
// open one may both); a legacy table's generations are spans of its own
// length. A legacy generation whose span equals one of the plan's (a plan
// change of G that kept the span) is listed once, as the plan's: both
// hold keys filed while that span was the newest.

// Spans appends the spans of the shard's generations in lookup order:
// those only legacy tables hold first (by start, then end), then the
// plan's oldest first; the last is the generation TestAndAdd adds to. They
// change only in calls for which Changes reports true.
func (s *FingerprintShard) Spans(dst []Span) []Span {
	return append(dst, s.spanList()...)
}

// spanList is Spans, computed when the generations changed since the last
// call.
func (s *FingerprintShard) spanList() []Span {
	if !s.spansStale && s.spans != nil {
		return s.spans
	}
	s.spansStale = false
	var plan, legacy []Span
	if s.started {
		for g := s.spansFrom(); g <= s.t; g++ {
			for _, tb := range s.tables {
				if tb.holdsLive(g) {
					plan = append(plan, tb.spanOf(g))
					break
				}
			}
		}
	}
	for _, tb := range s.legacy {
		if tb.live == 0 {
			continue
		}
		for g := tb.liveLo; g <= tb.newest; g++ {
			if sp := tb.spanOf(g); !slices.Contains(plan, sp) && !slices.Contains(legacy, sp) {
				legacy = append(legacy, sp)
			}
		}
	}
	slices.SortFunc(legacy, func(a, b Span) int { return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End)) })
	s.spans = append(append(s.spans[:0], legacy...), plan...)
	if s.spans == nil {
		s.spans = []Span{}
	}
	return s.spans
}

// holdsLive reports whether generation g of the table's plan answers
// lookups in it.
func (tb *Table) holdsLive(g uint64) bool {
	return tb.live != 0 && g >= tb.liveLo && g <= tb.newest
}

// spanOf is generation g's span in the table's plan.
func (tb *Table) spanOf(g uint64) Span {
	return Span{Start: int64(g) * tb.span, End: int64(g+1) * tb.span}
}

// Changes reports whether TestAndAdd, TestAndAddBatch or Advance with
// timestamp ts would open a generation or let one leave: the conditions
// TestAndAdd checks before it tests. Calls with timestamps for which it
// reports false leave Spans as it is (a table that fills up and gives way
// to the next level keeps the generations: it goes on answering for them).
func (s *FingerprintShard) Changes(ts time.Time) bool {
	ns := ts.UnixNano()
	return ns >= s.legacyUntil || !s.started || SpanIndex(ns, s.plan.span) > s.t
}

// Matching appends the positions, in Spans' order, of the generations
// that hold an entry matching h, newest first: the live tags of h's
// entries in every table. The newest generation is among them after a
// TestAndAdd of h. Entries are never lost while their generation is in
// the window, so every generation that really holds h is listed; the
// others are false positives (another key's entry with h's quotient and
// remainder).
func (s *FingerprintShard) Matching(h Hash, dst []int) []int {
	n := len(dst)
	spans := s.spanList()
	for _, ts := range [2][]*Table{s.tables, s.legacy} {
		for _, tb := range ts {
			for m := tb.tagsOf(h); m != 0; m &= m - 1 {
				sp := tb.spanOf(tb.genOf(uint64(bits.TrailingZeros64(m))))
				for i := len(spans) - 1; i >= 0; i-- {
					if spans[i] == sp {
						if !slices.Contains(dst[n:], i) {
							dst = append(dst, i)
						}
						break
					}
				}
			}
		}
	}
	slices.SortFunc(dst[n:], func(a, b int) int { return cmp.Compare(b, a) })
	return dst
}

// GenerationSpans lists the spans of the generations of Ages, oldest
// first: the last len(Ages) generations of the table, ending at End.
func (st TableStats) GenerationSpans() []Span {
	if len(st.Ages) == 0 || st.Newest < st.First {
		return nil
	}
	span := (st.End.UnixNano() - st.Start.UnixNano()) / int64(st.Newest-st.First+1)
	out := make([]Span, 0, len(st.Ages))
	for g := st.Newest + 1 - uint64(len(st.Ages)); g <= st.Newest; g++ {
		out = append(out, Span{Start: int64(g) * span, End: int64(g+1) * span})
	}
	return out
}
