package exact

import (
	"encoding/binary"
	"math"
)

// Hash is a key's 128-bit hash as the store keeps it: the first half of
// the murmur3-128 result big-endian in bytes 0–7, the second in 8–15
// (HashOf). Only equality matters to the store; the byte order fixes the
// on-disk order and therefore the files a checkpoint produces.
type Hash [16]byte

// HashOf packs the two halves of a 128-bit hash (bloom.Hash's H1, H2).
func HashOf(h1, h2 uint64) Hash {
	var h Hash
	binary.BigEndian.PutUint64(h[:8], h1)
	binary.BigEndian.PutUint64(h[8:], h2)
	return h
}

// MaxGeneration is the largest generation ID Add accepts. The ID above it
// is reserved for the store's own records.
const MaxGeneration = math.MaxUint64 - 1

// Key layout (LayoutName):
//
//	data:  generation ID (8 bytes, big-endian) ‖ hash (16 bytes)   value: empty
//	meta:  0xff × 8 ‖ name                                          value: per name
//
// Big-endian generation IDs sort the store by generation, so all keys of
// generations below g form the single range [∅, prefix(g)): dropping them
// is one range deletion, and the meta records (prefix math.MaxUint64) are
// never inside it.
const (
	keyLen = 8 + len(Hash{})

	// LayoutName names this key layout; a store records it and Open
	// refuses a store that records another.
	LayoutName = "bloomgate-exact-v1"
)

var (
	metaPrefix = genPrefix(math.MaxUint64)
	metaLayout = append(metaPrefix[:8:8], "layout"...)
	metaFloor  = append(metaPrefix[:8:8], "floor"...)
)

type dataKey [keyLen]byte

func makeKey(gen uint64, h Hash) dataKey {
	var k dataKey
	binary.BigEndian.PutUint64(k[:8], gen)
	copy(k[8:], h[:])
	return k
}

// genPrefix is the smallest key of generation gen, and the exclusive upper
// bound of generation gen−1.
func genPrefix(gen uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, gen)
	return b
}

// keyGen returns the generation of a data or meta key (math.MaxUint64 for
// meta keys), and false for a key too short to carry one.
func keyGen(k []byte) (uint64, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[:8]), true
}
