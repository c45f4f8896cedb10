package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// orphanHelperEnv makes the test binary act as a test process that dies
// without cleaning up (see TestChildDiesWithTestBinary).
const orphanHelperEnv = "PROCTEST_ORPHAN_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(orphanHelperEnv) == "1" {
		p, err := Launch(Config{Path: "/bin/sleep", Args: []string{"300"}})
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Printf("child %d\n", p.Pid())
		os.Exit(0) // no cleanup, as when a test binary is interrupted
	}
	os.Exit(m.Run())
}

func sh(t *testing.T, script string) *Proc {
	t.Helper()
	return Start(t, Config{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}})
}

func TestTailBufferKeepsTail(t *testing.T) {
	b := newTailBuffer(100)
	for i := range 1000 {
		b.writeLine(fmt.Sprintf("line %04d", i))
	}
	s := b.String()
	if len(s) > 100 || !strings.HasSuffix(s, "line 0999\n") || !strings.HasPrefix(s, "line ") {
		t.Fatalf("kept %d bytes %q: want at most 100, whole lines, ending with the last", len(s), s)
	}
	if got := b.tail(2); got != "line 0998\nline 0999" {
		t.Errorf("tail(2) = %q", got)
	}
	if got := newTailBuffer(10).tail(3); got != "" {
		t.Errorf("tail of nothing = %q", got)
	}
	one := newTailBuffer(10)
	one.writeLine(strings.Repeat("x", 25))
	if got := one.String(); got != strings.Repeat("x", 9)+"\n" {
		t.Errorf("a line longer than the buffer: %q, want its last 10 bytes", got)
	}
}

func TestOutputCaptureKeepsTail(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "out.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines atomic.Int64
	p := Start(t, Config{
		Path: "/bin/sh", Args: []string{"-c", `i=1; while [ $i -le 3000 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done`},
		Keep: 4096, Log: f, OnLine: func(string) { lines.Add(1) },
	})
	if !p.Wait(30 * time.Second) {
		t.Fatal("sh did not finish in 30s")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	out := p.Output()
	if len(out) > 4096 || !strings.HasSuffix(out, "err 3000\n") || strings.Contains(out, "out 1\n") {
		t.Errorf("retained %d bytes ending %q: want at most 4096 ending with the last line, without the first", len(out), p.Tail(1))
	}
	if got := p.Tail(2); got != "out 3000\nerr 3000" {
		t.Errorf("Tail(2) = %q", got)
	}
	if n := lines.Load(); n != 6000 {
		t.Errorf("OnLine saw %d lines, want 6000", n)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 6000 || !strings.HasPrefix(string(b), "out 1\n") {
		t.Errorf("log file holds %d lines starting %.20q, want all 6000", n, b)
	}
}

func TestWaitFor(t *testing.T) {
	p := sh(t, `echo starting; sleep 0.2; echo "listening on 127.0.0.1:4242"; sleep 30`)
	addr, err := p.WaitFor(regexp.MustCompile(`listening on (\S+)`), 10*time.Second)
	if err != nil || addr != "127.0.0.1:4242" {
		t.Fatalf("WaitFor: %q, %v", addr, err)
	}
}

func TestWaitForTimesOut(t *testing.T) {
	p := Start(t, Config{Name: "quiet", Path: "/bin/sh", Args: []string{"-c", "sleep 30"}})
	began := time.Now()
	_, err := p.WaitFor(regexp.MustCompile(`ready at (\S+)`), 300*time.Millisecond)
	if err == nil {
		t.Fatal("WaitFor on a silent process returned no error")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("WaitFor took %v with a 300ms limit", took)
	}
	for _, want := range []string{"quiet", `ready at (\\S+)`, "300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestWaitEndsWhenTheProcessExits(t *testing.T) {
	p := sh(t, "echo bye; exit 3")
	began := time.Now()
	err := p.WaitUntil("the impossible", time.Minute, 10*time.Millisecond, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "before the impossible") {
		t.Fatalf("error %v: want the exit status and what was awaited", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("WaitUntil took %v after the process exited", took)
	}
	// Output printed just before the exit still counts.
	if _, err := p.WaitFor(regexp.MustCompile(`bye`), time.Second); err != nil {
		t.Errorf("WaitFor after the exit: %v", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func TestKillGroupLeavesNoChild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	p := sh(t, `sleep 300 & echo "child $!"; wait`)
	s, err := p.WaitFor(regexp.MustCompile(`child (\d+)`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(s)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // should the test fail
	// Killing only the leader leaves the child running: the check below can
	// tell the difference.
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(p.Pid()); {
		if time.Now().After(deadline) {
			t.Fatalf("leader %d still alive 5s after SIGKILL", p.Pid())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !alive(child) {
		t.Fatalf("child %d died with its parent alone; the test cannot show the group kill", child)
	}
	if err := p.KillWait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(child); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still alive 5s after the group was killed", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestChildDiesWithTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signal and /proc: Linux only")
	}
	p := Start(t, Config{Name: "helper", Path: os.Args[0], Env: append(os.Environ(), orphanHelperEnv+"=1")})
	s, err := p.WaitFor(regexp.MustCompile(`child (\d+)`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(s)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // should the test fail
	if !p.Wait(10 * time.Second) {
		t.Fatal("helper did not exit")
	}
	for deadline := time.Now().Add(5 * time.Second); alive(child); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of a test binary that died is still alive after 5s", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStop(t *testing.T) {
	p := sh(t, `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	if _, err := p.WaitFor(regexp.MustCompile(`ready`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop after the exit: %v", err)
	}

	stubborn := sh(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	if _, err := stubborn.WaitFor(regexp.MustCompile(`ready`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := stubborn.Stop(300 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "no exit within 300ms of SIGTERM") {
		t.Errorf("Stop of a process ignoring SIGTERM: %v", err)
	}
	if !stubborn.Running() {
		t.Error("Stop killed the process after the grace period; it should leave that to the caller")
	}

	failing := sh(t, `trap 'exit 4' TERM; echo ready; while :; do sleep 0.05; done`)
	if _, err := failing.WaitFor(regexp.MustCompile(`ready`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := failing.Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("Stop of a process exiting with 4: %v", err)
	}
}

func TestLaunchMissingProgram(t *testing.T) {
	if _, err := Launch(Config{Path: filepath.Join(t.TempDir(), "none")}); err == nil || !strings.Contains(err.Error(), "starting none") {
		t.Errorf("Launch of a missing program: %v", err)
	}
	if _, err := Launch(Config{}); err == nil {
		t.Error("Launch without a path succeeded")
	}
}

// fakeTB records Skip and Fatal and ends the goroutine, as testing does.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func toolPath(tool Tool) (path string, tb *fakeTB) {
	tb = &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = tool.Path(tb)
	}()
	<-done
	return path, tb
}

func TestToolPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool-b"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("PROCTEST_TOOL", "")
	tool := Tool{Env: "PROCTEST_TOOL", Names: []string{"tool-a", "tool-b"}, Skip: "no tool: skip", Fail: "no tool: fail"}

	if p, tb := toolPath(tool); p != filepath.Join(dir, "tool-b") || tb.skipped != "" || tb.failed != "" {
		t.Errorf("found on PATH: %q (skip %q, fail %q)", p, tb.skipped, tb.failed)
	}
	t.Setenv("PROCTEST_TOOL", "/opt/tool")
	if p, _ := toolPath(tool); p != "/opt/tool" {
		t.Errorf("with the variable set: %q", p)
	}

	t.Setenv("PROCTEST_TOOL", "")
	missing := tool
	missing.Names = []string{"tool-a"}
	t.Setenv(requireToolsEnv, "")
	if _, tb := toolPath(missing); tb.skipped != "no tool: skip" || tb.failed != "" {
		t.Errorf("missing: skip %q, fail %q; want the skip reason", tb.skipped, tb.failed)
	}
	t.Setenv(requireToolsEnv, "1")
	if _, tb := toolPath(missing); tb.failed != "no tool: fail" || tb.skipped != "" {
		t.Errorf("missing with %s=1: skip %q, fail %q; want the failure", requireToolsEnv, tb.skipped, tb.failed)
	}
}

func TestBuildReportsGoBuildOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Build(ctx, t.TempDir(), BuildOptions{Flags: []string{"-no-such-build-flag"}})
	if err == nil || !strings.Contains(err.Error(), "go build -o") || !strings.Contains(err.Error(), "no-such-build-flag") {
		t.Errorf("Build with a bad flag: %v; want the command and go's complaint", err)
	}
}

func TestFreeAddr(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Fatalf("FreeAddr = %q, want 127.0.0.1:PORT", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on the free address: %v", err)
	}
	l.Close()
}
