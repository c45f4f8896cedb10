package brokercheck

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Watch applies the runtime rule to a running component's failures:
// credentials rotated or ACLs removed under it. The component retries such
// failures as any other (it may be a moment of an ACL change), but each
// one is logged at ERROR with the text it would get at start, at most once
// per LogEvery, and once they have gone on for GiveUp, with no gap longer
// than GiveUp between two, Failed returns the error to stop with: the
// process exits, and whoever restarts it sees the error at start, instead
// of a component retrying at debug level forever. Safe for concurrent use.
type Watch struct {
	Client *Client
	Log    *slog.Logger
	// Now reads the clock; default time.Now.
	Now func() time.Time
	// GiveUp and LogEvery default to DefaultGiveUp and DefaultLogEvery.
	GiveUp, LogEvery time.Duration

	mu                  sync.Mutex
	first, last, logged time.Time
}

// The runtime rule's default bounds.
const (
	DefaultGiveUp   = time.Minute
	DefaultLogEvery = 10 * time.Second
)

// Failed reports whether err is refused access (Client.Explain). If so it
// logs it, or returns the error to stop with (see Watch).
func (w *Watch) Failed(err error) (refused bool, stop error) {
	e := w.Client.Explain(err)
	if e == nil {
		return false, nil
	}
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	giveUp, logEvery := cmp.Or(w.GiveUp, DefaultGiveUp), cmp.Or(w.LogEvery, DefaultLogEvery)
	w.mu.Lock()
	if w.last.IsZero() || now.Sub(w.last) > giveUp {
		w.first, w.logged = now, time.Time{}
	}
	w.last = now
	since := now.Sub(w.first)
	log := w.logged.IsZero() || now.Sub(w.logged) >= logEvery
	if log {
		w.logged = now
	}
	w.mu.Unlock()
	if since >= giveUp {
		return true, fmt.Errorf("%w (refused for %s while running; stopping)", e, since.Round(time.Second))
	}
	if log && w.Log != nil {
		w.Log.Error("brokers refused access; retrying, and stopping if this goes on", "err", e,
			"kind", e.Kind.String(), "refused_for", since.Round(time.Second), "stops_after", giveUp)
	}
	return true, nil
}
