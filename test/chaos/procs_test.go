package chaos_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// buildBinary builds cmd/bloomgate into dir and returns its path. The race
// detector is optional: the worker's own tests run with -race; here the
// binary must be fast enough to process the load on a shared 2-core machine
// while three of them, the broker and the test run at once.
func buildBinary(t *testing.T, dir string, race bool) string {
	t.Helper()
	var opt proctest.BuildOptions
	if race {
		opt.Flags = []string{"-race"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := proctest.Build(ctx, dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// proc is one run of a child process. Its output goes, line by line, to a
// log file (kept when the test fails) and to an optional line callback.
type proc struct {
	*proctest.Proc
	name    string // set before the process starts: line callbacks read it
	logPath string
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

// start runs bin with args in the test's environment. Each output line is
// passed to onLine (from one goroutine per process).
func (ps *procs) start(name, bin string, args []string, onLine func(p *proc, line string)) (*proc, error) {
	ps.mu.Lock()
	ps.seq[name]++
	n := ps.seq[name]
	ps.mu.Unlock()
	logPath := filepath.Join(ps.logDir, fmt.Sprintf("%s.%02d.log", name, n))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating log file: %w", err)
	}
	p := &proc{name: fmt.Sprintf("%s#%d", name, n), logPath: logPath}
	var lineFn func(string)
	if onLine != nil {
		lineFn = func(line string) { onLine(p, line) }
	}
	// The log file has every line; memory keeps enough for Tail.
	p.Proc, err = proctest.Launch(proctest.Config{Name: p.name, Path: bin, Args: args, Log: f, OnLine: lineFn, Keep: 64 << 10})
	if err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		<-p.Done()
		f.Close()
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
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
		if !p.Wait(10 * time.Second) {
			ps.t.Logf("process %s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
		}
	}
}

// kill sends SIGKILL and returns at once.
func (p *proc) kill() {
	p.deliberate.Store(true)
	p.Kill()
}

// killWait sends SIGKILL and waits for the exit.
func (p *proc) killWait() error {
	p.deliberate.Store(true)
	return p.KillWait(10 * time.Second)
}

// terminate sends SIGTERM, waits up to grace, then SIGKILLs. It reports
// whether the process ended by itself within grace with exit code 0.
func (p *proc) terminate(grace time.Duration) (clean bool) {
	p.deliberate.Store(true)
	if p.Stop(grace) == nil {
		return true
	}
	if p.Running() {
		_ = p.killWait()
	}
	return false
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
