package bloom

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestSelectPDEP checks the PDEP select against the portable one wherever
// the CPU has BMI2, fast or not (select64 uses it only where it is fast).
func TestSelectPDEP(t *testing.T) {
	if !hasBMI2() {
		t.Skip("this CPU has no BMI2 (PDEP): select64 is the portable code here")
	}
	t.Logf("PDEP used by select64 on this CPU: %v", fastPDEP)
	rng := rand.New(rand.NewPCG(6, 6))
	for range 10000 {
		x := rng.Uint64() & rng.Uint64()
		for k := range uint(bits.OnesCount64(x)) {
			if got, want := selectPDEP(x, k), selectPortable(x, k); got != want {
				t.Fatalf("selectPDEP(%#x, %d) = %d, want %d", x, k, got, want)
			}
		}
	}
}
