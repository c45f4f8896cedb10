package bloom

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/twmb/murmur3"
)

// Hash is the 128-bit murmur3 hash of a key. H1 selects the block of a
// filter, H2 (with H1 rotated) the probe bits inside it; every probe of
// every filter of a shard derives from this one hash.
type Hash struct{ H1, H2 uint64 }

// HashName names the hash function as checkpoints record it: a different
// function makes stored filters meaningless for new keys. The seed is
// recorded apart (Seed).
const HashName = "murmur3-x64-128"

// HashKey hashes key with murmur3 x64 128-bit, seed 0: Seed{}.Hash.
func HashKey(key []byte) Hash {
	h1, h2 := murmur3.Sum128(key)
	return Hash{H1: h1, H2: h2}
}

// Seed keys the hash of one memory (a partition's filter state).
//
// With a publicly known, unkeyed hash, whoever can put keys into the input
// (URLs into a crawler frontier) can search offline for keys whose probes
// fall into the block of a chosen target key and cover its bits: the
// target then tests as seen and is never forwarded (a chosen false
// positive), with a few hundred keys instead of the filter's capacity. A
// secret seed makes the probe positions unpredictable without it, so such
// keys are no better than random ones. The seed is generated when a memory
// starts and stored in its checkpoints, so whoever can read the checkpoint
// bucket can read it; it protects against input, not against bucket
// readers. The zero Seed is the unkeyed hash (memories from before seeds).
type Seed struct{ K1, K2 uint64 }

// NewSeed returns a random, non-zero seed.
func NewSeed() (Seed, error) {
	var b [16]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return Seed{}, fmt.Errorf("generating hash seed: %w", err)
		}
		s := Seed{K1: binary.LittleEndian.Uint64(b[:8]), K2: binary.LittleEndian.Uint64(b[8:])}
		if !s.IsZero() {
			return s, nil
		}
	}
}

// IsZero reports whether s is the unkeyed hash.
func (s Seed) IsZero() bool { return s == Seed{} }

// Hash hashes key with murmur3 x64 128-bit seeded by s; the zero Seed gives
// HashKey's result. Same cost as HashKey.
func (s Seed) Hash(key []byte) Hash {
	h1, h2 := murmur3.SeedSum128(s.K1, s.K2, key)
	return Hash{H1: h1, H2: h2}
}

// String is the seed as 32 hex digits ("" for the zero Seed): the form
// checkpoints store. It is a secret: never log it.
func (s Seed) String() string {
	if s.IsZero() {
		return ""
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], s.K1)
	binary.LittleEndian.PutUint64(b[8:], s.K2)
	return hex.EncodeToString(b[:])
}

// ParseSeed reads what String writes.
func ParseSeed(s string) (Seed, error) {
	if s == "" {
		return Seed{}, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return Seed{}, fmt.Errorf("hash seed: want 32 hex digits, got %d characters", len(s))
	}
	return Seed{K1: binary.LittleEndian.Uint64(b[:8]), K2: binary.LittleEndian.Uint64(b[8:])}, nil
}
