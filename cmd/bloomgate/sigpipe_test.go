package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/proctest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// outputPipe is the read end of a process's stdout (and maybe stderr) that
// a test can close, as `bloomgate … | head` does once head has its lines.
type outputPipe struct {
	r    *os.File
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

// pipeOutput connects fd to a new pipe read by the test; call it before
// cmd.Start and closeChildEnd after.
func pipeOutput(t *testing.T) (*outputPipe, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &outputPipe{r: r, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		b := make([]byte, 32<<10)
		for {
			n, err := r.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p, w
}

func (p *outputPipe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// close closes the read end: the process's next write to it fails (EPIPE,
// or SIGPIPE if not ignored).
func (p *outputPipe) close() {
	p.r.Close()
	<-p.done
}

// started is a process started by the test with its own pipes (proctest
// merges and keeps reading the output, which these tests must stop).
type started struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func start(t *testing.T, cmd *exec.Cmd) *started {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
	})
	return s
}

// waitExit waits up to limit for the exit and returns the exit code (-1
// when a signal ended the process).
func (s *started) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %s", s.cmd.Path, limit)
	}
	return s.cmd.ProcessState.ExitCode()
}

// waitUntil polls cond until it holds; it fails the test after limit or
// when the process exits first.
func (s *started) waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool, output fmt.Stringer) {
	t.Helper()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-s.exited:
			t.Fatalf("exited (code %d) before %s; output:\n%s", s.cmd.ProcessState.ExitCode(), what, output)
		case <-deadline:
			t.Fatalf("no %s within %s; output:\n%s", what, limit, output)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkpointedOffsets sums the input offsets of the newest checkpoints at url.
func checkpointedOffsets(t *testing.T, url string) (partitions int, offsets int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := checkpoint.Open(ctx, url, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rep, err := checkpoint.Inspect(ctx, store)
	if err != nil {
		t.Fatalf("inspecting %s: %v", url, err)
	}
	for _, p := range rep.Partitions {
		partitions++
		offsets += max(p.InputOffset, 0)
	}
	return partitions, offsets
}

// TestRunClosedOutputKeepsFinalCheckpoint: `bloomgate run … 2>&1 | head`
// whose reader went away still shuts down in order on SIGINT: final
// checkpoints written, exit code 0 (a write to the closed pipe must not end
// the process with SIGPIPE on the way).
func TestRunClosedOutputKeepsFinalCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs broker, loadgen and worker binaries")
	}
	addr, _ := startBroker(t, "--topic", "in:2", "--topic", "out:2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const events = 3000
	if out, err := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "in",
		"--count", "3000", "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	metrics, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cpURL := "file://" + t.TempDir()
	cmd := exec.Command(binary, "run", "--brokers", addr, "--group", "g", "--input", "in", "--output", "out",
		"--key", "json:order_id", "--metrics-addr", metrics, "--checkpoint-url", cpURL,
		"--checkpoint-interval", "5m", "--log-level", "info")
	out, w := pipeOutput(t)
	cmd.Stdout, cmd.Stderr = w, w
	proc := start(t, cmd)
	w.Close()

	consumed := func() uint64 {
		res, err := http.Get("http://" + metrics + "/status.json")
		if err != nil {
			return 0
		}
		defer res.Body.Close()
		var s worker.Status
		if json.NewDecoder(res.Body).Decode(&s) != nil {
			return 0
		}
		var n uint64
		for _, p := range s.Partitions {
			n += p.Consumed
		}
		return n
	}
	proc.waitUntil(t, fmt.Sprintf("consumption of all %d events", events), 45*time.Second,
		func() bool { return consumed() == events }, out)
	// Claims only so far: the periodic checkpoint is minutes away.
	if _, offsets := checkpointedOffsets(t, cpURL); offsets != 0 {
		t.Fatalf("checkpoints up to %d input offsets before the shutdown; the test needs the final checkpoint to be the first", offsets)
	}
	logged := out.String()
	out.close()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := proc.waitExit(t, 60*time.Second); code != exitOK {
		t.Fatalf("exit code %d after SIGINT with the output's reader gone (-1: killed by a signal); output until then:\n%s", code, logged)
	}
	if parts, offsets := checkpointedOffsets(t, cpURL); parts != 2 || offsets != events {
		t.Fatalf("final checkpoints: %d partitions up to %d input offsets, want 2 partitions and %d", parts, offsets, events)
	}
}

// TestDevClosedStdoutKeepsFinalCheckpoint: `bloomgate dev --keep-running |
// head` whose reader went away before the summary: printing the summary
// must not end the demo, and SIGINT still stops it in order, with final
// checkpoints and exit code 0.
func TestDevClosedStdoutKeepsFinalCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(binary, "dev", "--events", "3000", "--keep-running", "--metrics-addr", "", "--checkpoint-url", "file://"+dir)
	out, w := pipeOutput(t)
	errOut, errW := pipeOutput(t)
	cmd.Stdout, cmd.Stderr = w, errW
	out.close() // before anything was printed
	proc := start(t, cmd)
	w.Close()
	errW.Close()
	proc.waitUntil(t, "the keep-running note after the summary", 60*time.Second,
		func() bool { return strings.Contains(errOut.String(), "broker and worker keep running until Ctrl-C") }, errOut)
	runs, err := filepath.Glob(filepath.Join(dir, "run-*"))
	if err != nil || len(runs) != 1 {
		t.Fatalf("run directories %v (%v), want one", runs, err)
	}
	cpURL := "file://" + runs[0]
	// Claims only so far: the periodic checkpoint is 10 s away.
	if _, offsets := checkpointedOffsets(t, cpURL); offsets != 0 {
		t.Fatalf("checkpoints up to %d input offsets before the shutdown; the test needs the final checkpoint to be the first", offsets)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := proc.waitExit(t, 60*time.Second); code != exitOK {
		t.Fatalf("exit code %d after SIGINT with stdout's reader gone (-1: killed by a signal); stderr:\n%s", code, errOut)
	}
	if parts, offsets := checkpointedOffsets(t, cpURL); parts != 8 || offsets != 3000 {
		t.Fatalf("final checkpoints: %d partitions up to %d input offsets, want 8 partitions and 3000", parts, offsets)
	}
}
