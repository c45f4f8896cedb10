package bloom

import "github.com/twmb/murmur3"

// Hash is the 128-bit murmur3 hash of a key. H1 selects the block of a
// filter, H2 (with H1 rotated) the probe bits inside it; every probe of
// every filter of a shard derives from this one hash.
type Hash struct{ H1, H2 uint64 }

// HashName names HashKey's function and seed, as checkpoints record it: a
// different hash makes stored filters meaningless for new keys.
const HashName = "murmur3-x64-128/seed0"

// HashKey hashes key with murmur3 x64 128-bit, seed 0.
func HashKey(key []byte) Hash {
	h1, h2 := murmur3.Sum128(key)
	return Hash{H1: h1, H2: h2}
}
