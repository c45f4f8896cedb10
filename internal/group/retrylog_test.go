package group

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// lineBuffer collects log lines from any goroutine.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) count(level, msg string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, "level="+level+" ") && strings.Contains(l, `msg="`+msg) {
			n++
		}
	}
	return n
}

// TestRetryLog: 8 minutes of failures once a second give the first line
// and summaries after 30 s, 1m30s, 3m30s and 7m30s (5 WARN lines, not
// 480), each summary with the time, the attempts and the last error; a
// success ends the run with one INFO line, and the next failure starts a
// new run with a WARN line at once.
func TestRetryLog(t *testing.T) {
	var logs lineBuffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &RetryLog{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), What: "offset commit",
		Now: func() time.Time { return now }}
	err := errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")
	for range 480 {
		r.Failed(err)
		now = now.Add(time.Second)
	}
	if n := logs.count("WARN", "offset commit failed; retrying"); n != 1 {
		t.Errorf("%d first-failure lines, want 1", n)
	}
	if n := logs.count("WARN", "offset commit still failing; retrying"); n != 4 {
		t.Errorf("%d summary lines over 8 minutes, want 4:\n%s", n, logs.buf.String())
	}
	if n := logs.count("DEBUG", "offset commit failed again"); n != 475 {
		t.Errorf("%d DEBUG lines, want 475", n)
	}
	if !strings.Contains(logs.buf.String(), "for=30s attempts=31 last_err=") || !strings.Contains(logs.buf.String(), "for=7m30s attempts=451 ") {
		t.Errorf("summaries lack the time and the attempts:\n%s", logs.buf.String())
	}
	if !r.Failing() {
		t.Error("not failing after failures")
	}
	r.Succeeded()
	r.Succeeded()
	if n := logs.count("INFO", "offset commit succeeded again"); n != 1 || !strings.Contains(logs.buf.String(), "after=8m0s failed_attempts=480") {
		t.Errorf("%d recovery lines, want 1 saying after 8m0s and 480 attempts", n)
	}
	r.Failed(err)
	if n := logs.count("WARN", "offset commit failed; retrying"); n != 2 {
		t.Errorf("a failure after the recovery: %d first-failure lines in all, want 2", n)
	}
}

// TestCommitterThinsFailureLines: a coordinator away for 8 minutes (the
// commit interval 1 s, no session bound that would fence the member)
// gives 5 WARN lines, not one per commit; every failure is still counted,
// and the first commit that lands logs one INFO line.
func TestCommitterThinsFailureLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs lineBuffer
		failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "commit_failures"})
		g := &fakeGen{}
		c := NewCommitter(g, "in", time.Second, slog.New(slog.NewTextHandler(&logs, nil)), failures, func(error) {})
		go c.Run()
		defer c.Close()
		ctx := context.Background()
		g.setErr(errors.New("committing offsets: dial tcp 127.0.0.1:9092: connect: connection refused"))
		for o := int64(1); o <= 8*60; o++ {
			c.Offer(ctx, 0, o)
			time.Sleep(time.Second)
		}
		warns := logs.count("WARN", "offset commit")
		if warns != 5 {
			t.Errorf("%d WARN lines over 8 minutes of failed commits, want 5:\n%s", warns, logs.buf.String())
		}
		var m dto.Metric
		if err := failures.Write(&m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetCounter().GetValue(); n < 470 {
			t.Errorf("%v failures counted, want every one (~480)", n)
		}
		g.setErr(nil)
		if err := c.CommitNow(ctx, 0, 481); err != nil {
			t.Fatal(err)
		}
		if n := logs.count("INFO", "offset commit succeeded again"); n != 1 {
			t.Errorf("%d recovery lines, want 1:\n%s", n, logs.buf.String())
		}
	})
}
