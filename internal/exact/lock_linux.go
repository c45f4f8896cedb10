package exact

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile is the store directory's lock (flock): one Store, or one
// Restore, per directory at a time.
const lockFile = "LOCK"

func lockDir(dir string) (io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is in use by another store: %w", dir, err)
	}
	return f, nil
}
