//go:build amd64 || arm64

package bloom

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches and
// returns at once (PREFETCHT0 on amd64, PRFM PLDL1KEEP on arm64): unlike
// a load, a miss does not hold back the instructions after it, so the
// lines a whole batch of lookups will read are fetched together. A hint
// only: it never faults and changes nothing; p must point into memory the
// caller holds.
//
//go:noescape
func prefetch(p unsafe.Pointer)
