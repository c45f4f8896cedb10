package bloom

import (
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

// BitsPerKey is the filter memory a shard plans per expected distinct key
// of its window, in bits: G generations, each sized for Capacity/(G−1)
// keys at the rate that keeps a lookup over all G within fpr. A plan of
// Capacity keys thus needs Capacity × BitsPerKey / 8 bytes, whatever the
// number of shards it is split into, up to one 64-byte block per
// generation and shard of rounding; overflow sub-filters, stacked only when
// more keys arrive than planned, come on top. It lets a caller bound a
// plan before it knows the shard count; Config.Validate checks one shard.
func BitsPerKey(fpr float64, generations int) (float64, error) {
	if err := filterplan.CheckFPR(fpr); err != nil {
		return 0, err
	}
	if err := filterplan.CheckGenerations(generations); err != nil {
		return 0, err
	}
	p := Config{Window: time.Hour, Generations: generations, Capacity: 1, FPR: fpr}.plan()
	if p.err != nil {
		return 0, p.err
	}
	_, lambda, err := blockedParams(subRate(p.fpr, 0))
	if err != nil {
		return 0, err
	}
	return float64(generations) / float64(generations-1) * blockBits / lambda, nil
}
