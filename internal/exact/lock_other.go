//go:build !linux

package exact

import (
	"io"
	"os"
	"path/filepath"
)

// lockFile is the store directory's lock file; only Linux takes the lock.
const lockFile = "LOCK"

func lockDir(dir string) (io.Closer, error) {
	return os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
}
