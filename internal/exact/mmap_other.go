//go:build !linux

package exact

import "os"

// mapFile reads path into memory where mapping is not implemented.
func mapFile(path string) ([]byte, error) { return os.ReadFile(path) }

func unmapFile([]byte) error { return nil }
