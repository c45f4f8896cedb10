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

// dataKey is a pending add: generation (big-endian, so that sorting
// groups generations) and hash.
type dataKey [8 + len(Hash{})]byte

func makeKey(gen uint64, h Hash) dataKey {
	var k dataKey
	binary.BigEndian.PutUint64(k[:8], gen)
	copy(k[8:], h[:])
	return k
}

func (k *dataKey) gen() uint64 { return binary.BigEndian.Uint64(k[:8]) }
func (k *dataKey) hash() Hash  { return Hash(k[8:]) }
