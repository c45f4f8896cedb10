package proctest

import "syscall"

// sysProcAttr puts the process in a group of its own, so that Kill reaches
// whatever it starts; and SIGKILLs it should the test binary die (an
// interrupt, a test timeout), since a signal from the terminal no longer
// reaches that group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
