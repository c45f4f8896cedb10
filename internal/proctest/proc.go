// Package proctest runs programs for tests: the bloomgate binary built once
// per test package, `bloomgate broker`, and external tools such as kcat.
//
// A process started here has its stdout and stderr merged and captured: the
// last MiB (by default) is kept in memory for waits and failure messages,
// and every line can also go to a log file or a callback. It runs in its own
// process group, and Kill ends the whole group, so nothing it started
// outlives the test. Waits are bounded by a limit and end early, with an
// error that names what was awaited, when the process exits first.
//
// Only tests import this package. It assumes a Unix system (process groups,
// SIGTERM).
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const (
	// defaultKeep is how many bytes of output a process keeps by default.
	defaultKeep = 1 << 20
	// outputGrace bounds how long the output is read after the process
	// exited: a descendant outside the group may still hold the pipe.
	outputGrace = 5 * time.Second
	// killGrace bounds the wait for an exit after SIGKILL on cleanup.
	killGrace = 10 * time.Second
	// failureLines is how many output lines Start logs for a failed test.
	failureLines = 60
)

// Config describes one process.
type Config struct {
	// Name is used in errors and log lines; default the program's base name.
	Name string
	// Path is the program to run; Args its arguments.
	Path string
	Args []string
	// Env is the whole environment, as exec.Cmd.Env: nil inherits the
	// test's environment.
	Env []string
	// Log, if set, receives every output line (e.g. a log file). It is not
	// closed here; all lines are written once Done is closed.
	Log io.Writer
	// OnLine, if set, is called with every output line, in order, from one
	// goroutine. It must not block for long: the process's output waits.
	OnLine func(line string)
	// Keep is how many bytes of output Output retains (default 1 MiB).
	Keep int
}

// Proc is a running (or exited) process.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	out     *tailBuffer
	started time.Time
	done    chan struct{} // closed once the process exited and its output was read
	err     error         // exit error; valid after done
}

// Launch starts the process described by cfg. The caller owns it: it must
// end it (Kill, Stop) and wait for Done. Inside a test, use Start.
func Launch(cfg Config) (*Proc, error) {
	if cfg.Path == "" {
		return nil, errors.New("proctest: Config.Path is empty")
	}
	name := cfg.Name
	if name == "" {
		name = filepath.Base(cfg.Path)
	}
	keep := cfg.Keep
	if keep <= 0 {
		keep = defaultKeep
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting %s: creating the output pipe: %w", name, err)
	}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Env = cfg.Env
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	w.Close() // the child holds its own copy
	p := &Proc{name: name, cmd: cmd, out: newTailBuffer(keep), started: time.Now(), done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.readLines(r, cfg.Log, cfg.OnLine)
	}()
	go func() {
		p.err = cmd.Wait()
		select {
		case <-read:
		case <-time.After(outputGrace):
			r.Close() // ends the read with an error
			<-read
		}
		r.Close()
		close(p.done)
	}()
	return p, nil
}

// Start launches the process for test t; a failure to start fails the test.
// When the test ends, the process group is killed and waited for, and if
// the test failed, the last lines of the output are logged.
func Start(t testing.TB, cfg Config) *Proc {
	t.Helper()
	p, err := Launch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.KillWait(killGrace); err != nil {
			t.Log(err)
		}
		if t.Failed() {
			t.Logf("%s output (last %d lines):\n%s", p.name, failureLines, p.Tail(failureLines))
		}
	})
	return p
}

func (p *Proc) readLines(r io.Reader, log io.Writer, onLine func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		p.out.writeLine(line)
		if log != nil {
			fmt.Fprintln(log, line)
		}
		if onLine != nil {
			onLine(line)
		}
	}
	// A line longer than the scanner's limit ends the scan: drain the rest
	// so that the process never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// Pid is the process id; it is also the id of the process's group.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Started is when the process was started.
func (p *Proc) Started() time.Time { return p.started }

// Done is closed once the process exited and all its output was read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is the exit error (nil for exit code 0); valid once Done is closed.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Output is the retained output (the last Config.Keep bytes, starting at a
// line boundary when older output was dropped).
func (p *Proc) Output() string { return p.out.String() }

// Tail is the last n lines of the retained output.
func (p *Proc) Tail(n int) string { return p.out.tail(n) }

// Kill sends SIGKILL to the process's group and returns at once.
func (p *Proc) Kill() {
	// ESRCH: the group is gone already.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// Wait waits up to limit for the exit; it reports whether it happened.
func (p *Proc) Wait(limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// KillWait kills the process group and waits up to limit for the exit.
func (p *Proc) KillWait(limit time.Duration) error {
	p.Kill()
	if !p.Wait(limit) {
		return fmt.Errorf("%s (pid %d) did not exit within %s of SIGKILL", p.name, p.Pid(), limit)
	}
	return nil
}

// Stop sends SIGTERM to the process and waits up to grace for it to exit.
// It returns nil only for an exit with code 0 within grace; on a timeout
// the process is left running (Start's cleanup, or KillWait, ends it).
func (p *Proc) Stop(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	if !p.Wait(grace) {
		return fmt.Errorf("%s: no exit within %s of SIGTERM", p.name, grace)
	}
	if p.err != nil {
		return fmt.Errorf("%s: exit after SIGTERM: %w", p.name, p.err)
	}
	return nil
}
