package bloom

import (
	"math"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

// TestBitsPerKeyMatchesShard: Capacity × BitsPerKey / 8 is the memory of a
// shard with all its generations open, within the rounding to blocks.
func TestBitsPerKeyMatchesShard(t *testing.T) {
	for _, tc := range []struct {
		fpr  float64
		gens int
	}{{0.01, 4}, {0.001, 4}, {0.01, 2}, {0.05, 8}} {
		cfg := Config{Window: 3 * time.Hour, Generations: tc.gens, Capacity: 300_000, FPR: tc.fpr}
		s, err := NewShard(cfg)
		if err != nil {
			t.Fatal(err)
		}
		span := cfg.Window / time.Duration(tc.gens-1)
		for i := range tc.gens {
			s.TestAndAdd(HashKey([]byte{byte(i)}), time.Unix(0, 0).Add(time.Duration(i)*span+span/2))
		}
		bits, err := BitsPerKey(tc.fpr, tc.gens)
		if err != nil {
			t.Fatal(err)
		}
		got, want := float64(cfg.Capacity)*bits/8, float64(s.Stats().Bytes)
		if math.Abs(got-want) > float64(tc.gens*blockBits/8) {
			t.Errorf("fpr %v G %d: Capacity × BitsPerKey / 8 = %.0f bytes, the open shard holds %.0f", tc.fpr, tc.gens, got, want)
		}
	}
}

func TestBitsPerKeyRefuses(t *testing.T) {
	for _, tc := range []struct {
		fpr  float64
		gens int
	}{{0, 4}, {1, 4}, {0.01, 1}, {0.01, filterplan.MaxGenerations + 1}, {1e-30, 4}} {
		if b, err := BitsPerKey(tc.fpr, tc.gens); err == nil {
			t.Errorf("BitsPerKey(%v, %d) = %v, want an error", tc.fpr, tc.gens, b)
		}
	}
}
