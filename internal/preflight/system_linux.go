package preflight

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMemoryLimit is the memory limit of the process's cgroup (v2
// memory.max, v1 memory.limit_in_bytes), 0 if none is set or readable.
func cgroupMemoryLimit() uint64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v >= 1<<62 { // "max", or v1's "unlimited" (a huge number)
			return 0
		}
		return v
	}
	return 0
}

// freeBytes is the room an unprivileged writer has on dir's file system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
