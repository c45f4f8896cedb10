package mockcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// mockHeader is the header the launcher includes; Debian's librdkafka-dev
// installs it (.ci/deps.sh).
const mockHeader = "/usr/include/librdkafka/rdkafka_mock.h"

var gccTool = proctest.Tool{
	Env:   "BLOOMGATE_CC",
	Names: []string{"gcc", "cc"},
	Skip:  "no C compiler (gcc) on PATH: the mock cluster's launcher is C",
	Fail:  "no C compiler (gcc) although BLOOMGATE_REQUIRE_TOOLS=1: apt-get install gcc",
}

// buildLauncher compiles testdata/launcher.c into a temporary directory,
// or skips t (fails it under BLOOMGATE_REQUIRE_TOOLS=1) when the compiler
// or librdkafka's headers are missing.
func buildLauncher(t *testing.T) string {
	t.Helper()
	cc := gccTool.Path(t)
	if _, err := os.Stat(mockHeader); err != nil {
		if os.Getenv("BLOOMGATE_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s missing although BLOOMGATE_REQUIRE_TOOLS=1: run .ci/deps.sh (Debian package librdkafka-dev)", mockHeader)
		}
		t.Skipf("%s missing: librdkafka's mock cluster needs the Debian package librdkafka-dev (.ci/deps.sh installs it)", mockHeader)
	}
	src, err := filepath.Abs(filepath.Join("testdata", "launcher.c"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "launcher")
	out, err := exec.Command(cc, "-O1", "-Wall", "-o", bin, src, "-lrdkafka").CombinedOutput()
	if err != nil {
		t.Fatalf("compiling the launcher: %v\n%s", err, out)
	}
	return bin
}

// cluster is a running launcher: librdkafka's mock cluster, steered by
// line commands on its stdin.
type cluster struct {
	bootstrap string
	mu        sync.Mutex // one command at a time
	in        io.WriteCloser
	out       *bufio.Scanner
	stderr    bytes.Buffer
}

// startCluster starts the launcher with brokers brokers and the topics
// ("name:partitions"), replicated to every broker; it ends with the test.
func startCluster(t *testing.T, launcher string, brokers int, topics ...string) *cluster {
	t.Helper()
	c := &cluster{}
	cmd := exec.Command(launcher, append([]string{fmt.Sprint(brokers)}, topics...)...)
	var stderr io.Writer = &c.stderr
	if *flagLogs != "" {
		f, err := os.Create(filepath.Join(*flagLogs, "mockcluster.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		stderr = io.MultiWriter(stderr, f)
	}
	cmd.Stderr = &syncWriter{w: stderr, mu: &c.mu}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		in.Close() // the launcher exits at the end of its input
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c.in, c.out = in, bufio.NewScanner(out)
	line, err := c.readLine(10 * time.Second)
	if err != nil {
		t.Fatalf("mock cluster: no bootstrap servers: %v; stderr: %s", err, c.stderrText())
	}
	for _, a := range strings.Split(line, ",") {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("mock cluster: broker %q does not listen on 127.0.0.1", a)
		}
	}
	c.bootstrap = line
	return c
}

func (c *cluster) stderrText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

func (c *cluster) readLine(limit time.Duration) (string, error) {
	got := make(chan bool, 1)
	go func() { got <- c.out.Scan() }()
	select {
	case ok := <-got:
		if !ok {
			return "", fmt.Errorf("launcher exited (%v)", c.out.Err())
		}
		return c.out.Text(), nil
	case <-time.After(limit):
		return "", fmt.Errorf("no answer within %v", limit)
	}
}

// do sends one command and fails t unless the launcher answers ok.
func (c *cluster) do(t *testing.T, format string, a ...any) {
	t.Helper()
	cmd := fmt.Sprintf(format, a...)
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		t.Fatalf("mock cluster: %s: %v", cmd, err)
	}
	line, err := c.readLine(10 * time.Second)
	if err != nil || line != "ok" {
		t.Fatalf("mock cluster: %s: %q %v", cmd, line, err)
	}
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// boundedCtx bounds a helper's Kafka calls.
func boundedCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
