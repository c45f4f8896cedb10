package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds cmd/bloomgate into dir and returns its path. The race
// detector is optional: the worker's own tests run with -race; here the
// binary must be fast enough to process the load on a shared 2-core machine
// while three of them, the broker and the test run at once.
func buildBinary(t *testing.T, dir string, race bool) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("finding the module root: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "bloomgate")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/bloomgate")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return bin
}

// proc is one run of a child process. Its stderr and stdout go, line by
// line, to a log file and to an optional line callback.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process exited and its output is read
	exitErr error         // valid after done
	// deliberate is set before the test signals the process, so that an exit
	// it caused is told apart from one the process chose.
	deliberate atomic.Bool
}

// procs starts child processes and kills every one still running when the
// test ends, passed or failed.
type procs struct {
	t      *testing.T
	logDir string
	mu     sync.Mutex
	all    []*proc
	seq    map[string]int
}

func newProcs(t *testing.T, logDir string) *procs {
	ps := &procs{t: t, logDir: logDir, seq: map[string]int{}}
	t.Cleanup(ps.killAll)
	return ps
}

// start runs bin with args and env added to the test's environment. Each
// output line is passed to onLine (from one goroutine per process).
func (ps *procs) start(name, bin string, args, env []string, onLine func(p *proc, line string)) (*proc, error) {
	ps.mu.Lock()
	ps.seq[name]++
	n := ps.seq[name]
	ps.mu.Unlock()
	logPath := filepath.Join(ps.logDir, fmt.Sprintf("%s.%02d.log", name, n))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating log file: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{name: fmt.Sprintf("%s#%d", name, n), logPath: logPath, cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.started = time.Now()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()

	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if onLine != nil {
				onLine(p, line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.exitErr = cmd.Wait()
		pw.Close()
		<-scanned
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// killAll SIGKILLs every process this test started that is still running.
func (ps *procs) killAll() {
	ps.mu.Lock()
	all := append([]*proc(nil), ps.all...)
	ps.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			ps.t.Logf("process %s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
		}
	}
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and returns at once.
func (p *proc) kill() {
	p.deliberate.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

// waitExit waits up to d for the process to exit.
func (p *proc) waitExit(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// killWait sends SIGKILL and waits for the exit.
func (p *proc) killWait() error {
	p.kill()
	if !p.waitExit(10 * time.Second) {
		return fmt.Errorf("%s did not exit 10s after SIGKILL", p.name)
	}
	return nil
}

// terminate sends SIGTERM, waits up to grace, then SIGKILLs. It reports
// whether the process ended by itself within grace with exit code 0.
func (p *proc) terminate(grace time.Duration) (clean bool) {
	p.deliberate.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.waitExit(grace) {
		return p.exitErr == nil
	}
	_ = p.killWait()
	return false
}

// tail returns the last n lines of the process's log file.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until ready is closed, the process exits or d passes.
func waitReady(p *proc, ready <-chan struct{}, d time.Duration) error {
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it was ready: %v", p.name, p.exitErr)
	case <-time.After(d):
		return errors.New(p.name + " not ready in " + d.String())
	}
}

// parseLogKV parses the key=value pairs of a log/slog text line; quoted
// values are unquoted.
func parseLogKV(line string) map[string]string {
	kv := map[string]string{}
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		eq := strings.IndexByte(line[i:], '=')
		if eq < 0 {
			break
		}
		key := line[i : i+eq]
		i += eq + 1
		var val string
		if i < len(line) && line[i] == '"' {
			j := i + 1
			var b strings.Builder
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				b.WriteByte(line[j])
				j++
			}
			val = b.String()
			i = j + 1
		} else {
			j := strings.IndexByte(line[i:], ' ')
			if j < 0 {
				j = len(line) - i
			}
			val = line[i : i+j]
			i += j
		}
		kv[key] = val
	}
	return kv
}
