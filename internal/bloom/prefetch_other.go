//go:build !amd64 && !arm64

package bloom

import "unsafe"

// prefetch does nothing where no prefetch instruction is wired up: the
// lookups then take their misses one by one.
func prefetch(unsafe.Pointer) {}
