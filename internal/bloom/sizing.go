package bloom

import (
	"fmt"
	"math"
	"sync"
)

const (
	blockBits  = 512 // one 64-byte cache line
	blockWords = blockBits / 64
	maxK       = 32

	// MaxFilterBytes bounds every allocation of bits: a single filter, a
	// generation (all its sub-filters) and a shard's planned size.
	MaxFilterBytes = 64 << 30
)

// blockedFPR is the false-positive rate of a blocked filter with 512-bit
// blocks, k probes per key and on average lambda keys per block. The number
// of keys J in the block a never-added key maps to is Poisson(lambda); given
// J, a probe hits a set bit with probability 1-q^J where q = (1-1/512)^k.
//
//	FPR = Σ_j e^-λ λ^j / j! · (1 - q^j)^k
func blockedFPR(lambda float64, k int) float64 {
	if lambda <= 0 {
		return 0
	}
	q := math.Pow(1-1.0/blockBits, float64(k))
	lq := math.Log(q)
	ll := math.Log(lambda)
	jmax := int(lambda+12*math.Sqrt(lambda)) + 40
	sum := 0.0
	for j := 1; j <= jmax; j++ {
		lg, _ := math.Lgamma(float64(j + 1))
		pj := math.Exp(-lambda + float64(j)*ll - lg)
		if pj == 0 {
			continue
		}
		sum += pj * math.Pow(-math.Expm1(float64(j)*lq), float64(k))
	}
	return sum
}

// sized memoizes blockedParams: its search takes ~5 ms, too long for the
// insert that stacks a sub-filter, and the same few rates recur (sub-filter
// i of every generation of a shard gets the same rate). At most
// maxSizedRates rates are kept.
var sized struct {
	sync.Mutex
	rates map[float64]sizedRate
}

type sizedRate struct {
	k      int
	lambda float64
}

const maxSizedRates = 1024

// blockedParams returns the probe count k and the largest load (keys per
// block) for which blockedFPR stays at or below p. k is searched around the
// classic optimum −log2(p); the load by bisection.
func blockedParams(p float64) (k int, lambda float64, err error) {
	if !(p > 0 && p < 1) {
		return 0, 0, fmt.Errorf("false-positive rate %v outside (0, 1)", p)
	}
	sized.Lock()
	r, ok := sized.rates[p]
	sized.Unlock()
	if ok {
		return r.k, r.lambda, nil
	}
	k, lambda, err = searchParams(p)
	if err != nil {
		return 0, 0, err
	}
	sized.Lock()
	if sized.rates == nil {
		sized.rates = make(map[float64]sizedRate)
	}
	if len(sized.rates) < maxSizedRates {
		sized.rates[p] = sizedRate{k, lambda}
	}
	sized.Unlock()
	return k, lambda, nil
}

// searchParams is blockedParams without the memo.
func searchParams(p float64) (k int, lambda float64, err error) {
	kc := int(math.Round(-math.Log2(p)))
	bestK, bestL := 0, 0.0
	for k := max(1, kc-4); k <= min(maxK, kc+4); k++ {
		lo, hi := 1e-6, 1e5
		if blockedFPR(lo, k) > p {
			continue
		}
		for i := 0; i < 60; i++ {
			mid := math.Sqrt(lo * hi)
			if blockedFPR(mid, k) <= p {
				lo = mid
			} else {
				hi = mid
			}
		}
		if lo > bestL {
			bestK, bestL = k, lo
		}
	}
	if bestK == 0 {
		return 0, 0, fmt.Errorf("false-positive rate %v too small for 512-bit blocks", p)
	}
	return bestK, bestL, nil
}

// filterParams sizes a blocked filter for capacity keys at rate p.
func filterParams(capacity uint64, p float64) (k int, nblocks uint64, err error) {
	if capacity == 0 {
		return 0, 0, fmt.Errorf("capacity must be at least 1")
	}
	k, lambda, err := blockedParams(p)
	if err != nil {
		return 0, 0, err
	}
	nb := math.Ceil(float64(capacity) / lambda)
	if nb*blockBits/8 > MaxFilterBytes {
		return 0, 0, fmt.Errorf("%d keys at rate %v need %.0f bytes, more than the limit of %d: %w",
			capacity, p, nb*blockBits/8, int64(MaxFilterBytes), ErrTooLarge)
	}
	return k, max(uint64(nb), 1), nil
}

// classicBitsPerKey is the optimum of a classic Bloom filter: −ln p / (ln 2)².
func classicBitsPerKey(p float64) float64 {
	return -math.Log(p) / (math.Ln2 * math.Ln2)
}
