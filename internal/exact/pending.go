package exact

import "slices"

// pendingChunk is how many adds the small map of the newest adds holds
// before they are sorted into the middle array; midChunk, how many that
// array holds before it is merged into the rest.
const (
	pendingChunk = 2048
	midChunk     = 4 * pendingChunk
)

// pending holds the adds not yet written as runs: the newest ones in a
// small map (at most pendingChunk), older ones in a sorted middle array (at
// most midChunk), the oldest in one sorted array; the arrays hold no
// duplicates of their own. Each full map is merged into the middle array,
// each full middle array into the rest. Memory: 24 bytes per held add,
// plus the small map (about 100 KiB) and the middle array (192 KiB); a
// map of every held add cost 2–4 times that, and a process holds one per
// partition. A lookup is one small-map probe and two binary searches; an
// add, a small-map insert and its share of the merges: each held add is
// moved about 2 + FlushKeys/(2·midChunk) times (a memmove), where merging
// every map into one array moved it FlushKeys/(2·pendingChunk) times, 16
// at the defaults, 12 % of exact mode's CPU (docs/benchmarks.md, "Buffers
// per partition, and record batches decoded in place").
type pending struct {
	recent map[entry]struct{}
	mid    []entry // ascending by cmpEntry, no duplicates
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

// len counts the held adds (an add repeated in the map and the arrays
// counts twice until they are merged).
func (p *pending) len() int { return len(p.sorted) + len(p.mid) + len(p.recent) }

func (p *pending) has(k entry) bool {
	if _, ok := p.recent[k]; ok {
		return true
	}
	if _, found := slices.BinarySearchFunc(p.mid, k, cmpEntry); found {
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

// merge moves the map's adds into the middle array, and that into the
// rest once it is full.
func (p *pending) merge() {
	if len(p.recent) > 0 {
		c := p.chunk[:0]
		for k := range p.recent {
			c = append(c, k)
		}
		clear(p.recent)
		slices.SortFunc(c, cmpEntry)
		p.mid, p.chunk = mergeSorted(p.mid, c), c[:0]
	}
	if len(p.mid) >= midChunk {
		p.sorted, p.mid = mergeSorted(p.sorted, p.mid), p.mid[:0]
	}
}

// mergeSorted merges c into s, both ascending without duplicates, from
// the back in place (s grows by at most len(c)), keeping one of each entry
// in both.
func mergeSorted(s, c []entry) []entry {
	n := len(s)
	s = slices.Grow(s, len(c))[:n+len(c)]
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
	return s
}

// drain returns every held add, sorted by generation and hash, without
// duplicates; valid until reset.
func (p *pending) drain() []entry {
	p.merge()
	if len(p.mid) > 0 {
		p.sorted, p.mid = mergeSorted(p.sorted, p.mid), p.mid[:0]
	}
	return p.sorted
}

func (p *pending) reset() {
	clear(p.recent)
	p.mid = p.mid[:0]
	p.sorted = p.sorted[:0]
}
