//go:build !linux

package proctest

import "syscall"

// sysProcAttr puts the process in a group of its own, so that Kill reaches
// whatever it starts. (Only Linux also kills it when the test binary dies.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
