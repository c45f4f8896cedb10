package exact

import "slices"

// pendingChunk is how many adds the small map of the newest adds holds
// before they are sorted into the rest.
const pendingChunk = 2048

// pending holds the adds not yet written as runs: the newest ones in a
// small map (at most pendingChunk), the older ones in one sorted array
// without duplicates, into which each full map is merged. Memory: 24
// bytes per held add, plus the small map (about 100 KiB); a map of every
// held add cost 2–4 times that, and a process holds one per partition.
// A lookup is one small-map probe and a binary search; an add, a
// small-map insert and its share of the merges (each held add is moved
// about FlushKeys/(2·pendingChunk) times, a memmove).
type pending struct {
	recent map[entry]struct{}
	sorted []entry // ascending by cmpEntry, no duplicates
	chunk  []entry // merge scratch: recent, sorted
}

func newPending(capacity int) *pending {
	return &pending{
		recent: make(map[entry]struct{}, pendingChunk),
		sorted: make([]entry, 0, capacity),
		chunk:  make([]entry, 0, pendingChunk),
	}
}

// len counts the held adds (an add repeated in the map and the array
// counts twice until the map is merged).
func (p *pending) len() int { return len(p.sorted) + len(p.recent) }

func (p *pending) has(k entry) bool {
	if _, ok := p.recent[k]; ok {
		return true
	}
	_, found := slices.BinarySearchFunc(p.sorted, k, cmpEntry)
	return found
}

func (p *pending) add(k entry) {
	p.recent[k] = struct{}{}
	if len(p.recent) >= pendingChunk {
		p.merge()
	}
}

// merge moves the map's adds into the sorted array: sorted, then merged
// from the back in place (the array grows by at most the map's size).
func (p *pending) merge() {
	if len(p.recent) == 0 {
		return
	}
	c := p.chunk[:0]
	for k := range p.recent {
		c = append(c, k)
	}
	clear(p.recent)
	slices.SortFunc(c, cmpEntry)
	n := len(p.sorted)
	s := slices.Grow(p.sorted, len(c))[:n+len(c)]
	i, j, w := n-1, len(c)-1, len(s)-1
	for j >= 0 {
		switch d := -1; {
		case i >= 0:
			d = cmpEntry(s[i], c[j])
			fallthrough
		default:
			switch {
			case d > 0:
				s[w] = s[i]
				i--
			case d == 0: // in both: keep one
				s[w] = c[j]
				i--
				j--
			default:
				s[w] = c[j]
				j--
			}
		}
		w--
	}
	// Duplicates left a gap at s[i+1 : w+1]: close it.
	if gap := w - i; gap > 0 {
		copy(s[i+1:], s[w+1:])
		s = s[:len(s)-gap]
	}
	p.sorted, p.chunk = s, c[:0]
}

// drain returns every held add, sorted by generation and hash, without
// duplicates; valid until reset.
func (p *pending) drain() []entry {
	p.merge()
	return p.sorted
}

func (p *pending) reset() {
	clear(p.recent)
	p.sorted = p.sorted[:0]
}
