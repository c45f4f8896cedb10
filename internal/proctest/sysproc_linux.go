package proctest

import "syscall"

// sysProcAttr puts the process in a group of its own, so that Kill reaches
// whatever it starts; and SIGKILLs it should the test binary die (an
// interrupt, a test timeout), since a signal from the terminal no longer
// reaches that group. Pdeathsig follows the OS thread that started the
// process, not the test binary: a process started from a goroutine that
// locked its thread and then exited would be killed with that thread. The
// helpers never lock threads; callers must not start processes from one
// that does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
