//go:build !amd64

package bloom

// select64 is the position of the k-th (0-based) set bit of x, which has
// more than k set bits.
func select64(x uint64, k uint) uint { return selectPortable(x, k) }
