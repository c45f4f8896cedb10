package brokercheck

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestWatch: refused access is logged at ERROR at most every LogEvery, a
// gap longer than GiveUp starts over, and failures lasting GiveUp return
// the error to stop with; other failures are not its business.
func TestWatch(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1_000_000, 0)
	w := &Watch{
		Client: &Client{Component: "the worker", Needs: workerNeeds},
		Log:    slog.New(slog.NewTextHandler(&logs, nil)),
		Now:    func() time.Time { return now },
	}
	refusedAt := func(at time.Duration) (bool, error) {
		now = time.Unix(1_000_000, 0).Add(at)
		return w.Failed(kafka.GroupAuthorizationFailed)
	}
	if refused, stop := w.Failed(errors.New("connection reset")); refused || stop != nil {
		t.Fatalf("a network failure: refused %v, stop %v", refused, stop)
	}
	for _, at := range []time.Duration{0, 5 * time.Second, 15 * time.Second, 59 * time.Second} {
		if refused, stop := refusedAt(at); !refused || stop != nil {
			t.Fatalf("at %s: refused %v, stop %v; want refused, no stop yet", at, refused, stop)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 3 {
		t.Errorf("logged %d ERROR lines for failures at 0, 5, 15, 59 s, want 3 (one per 10 s):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `READ on group \"dedup\" (--group)`) {
		t.Errorf("the log line lacks the explanation:\n%s", logs.String())
	}
	// A gap longer than GiveUp: a new episode.
	if _, stop := refusedAt(59*time.Second + DefaultGiveUp + time.Second); stop != nil {
		t.Fatalf("after a gap: stop %v, want none", stop)
	}
	_, stop := refusedAt(59*time.Second + 2*DefaultGiveUp + time.Second)
	var e *Error
	if !errors.As(stop, &e) || e.Kind != Authorization || !strings.Contains(stop.Error(), "(refused for 1m0s while running; stopping)") {
		t.Errorf("after GiveUp of failures: stop %v, want the explained error", stop)
	}
}
