//go:build !linux

package preflight

import "errors"

func cgroupMemoryLimit() uint64 { return 0 }

func freeBytes(string) (uint64, error) { return 0, errors.New("not measured on this system") }
