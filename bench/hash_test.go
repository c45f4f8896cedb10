package bench

import (
	"testing"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/cespare/xxhash/v2"
)

var sink uint64

// BenchmarkHash compares the per-key hash cost of bloomgate (murmur3-128)
// and the blobloom setup (xxhash64).
func BenchmarkHash(b *testing.B) {
	for _, kind := range []string{"order16", "url60"} {
		gen := orderKeys
		if kind == "url60" {
			gen = urlKeys
		}
		b.Run("murmur3-128/key="+kind, func(b *testing.B) {
			g := gen(false)
			for i := uint64(0); b.Loop(); i++ {
				h := bloom.HashKey(g.key(i))
				sink += h.H1 ^ h.H2
			}
		})
		b.Run("xxhash64/key="+kind, func(b *testing.B) {
			g := gen(false)
			for i := uint64(0); b.Loop(); i++ {
				sink += xxhash.Sum64(g.key(i))
			}
		})
	}
}
