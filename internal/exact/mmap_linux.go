package exact

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps path read-only. Lookups touch one or two random pages per
// run: MADV_RANDOM keeps the kernel from reading ahead around them.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := info.Size()
	if size == 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("%w: %s: %d bytes", errMalformed, path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	_ = syscall.Madvise(data, syscall.MADV_RANDOM)
	return data, nil
}

func unmapFile(data []byte) error {
	if data == nil {
		return nil
	}
	return syscall.Munmap(data)
}
