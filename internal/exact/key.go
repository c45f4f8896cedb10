package exact

import "encoding/binary"

// Hash is a key's 128-bit hash as the store keeps it: the first half of
// the murmur3-128 result big-endian in bytes 0–7, the second in 8–15
// (HashOf). Only equality matters to the store; the byte order fixes the
// order in run files and therefore their bytes.
type Hash [16]byte

// HashOf packs the two halves of a 128-bit hash (bloom.Hash's H1, H2).
func HashOf(h1, h2 uint64) Hash {
	var h Hash
	binary.BigEndian.PutUint64(h[:8], h1)
	binary.BigEndian.PutUint64(h[8:], h2)
	return h
}

// halves returns the hash's two halves (HashOf's arguments).
func (h Hash) halves() (hi, lo uint64) {
	return binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])
}

// entry is a pending add: generation and the two halves of the hash, so
// that sorting compares integers.
type entry struct{ gen, hi, lo uint64 }

func makeEntry(gen uint64, h Hash) entry {
	return entry{gen, binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])}
}

func cmpEntry(a, b entry) int {
	switch {
	case a.gen < b.gen:
		return -1
	case a.gen > b.gen:
		return 1
	}
	return cmp128(a.hi, a.lo, b.hi, b.lo)
}
