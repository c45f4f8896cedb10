package checkpoint

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/s3test"
	"github.com/prometheus/client_golang/prometheus"
)

// faultOptions fail fast: few attempts, short backoff.
func faultOptions() Options {
	o := testOptions(prometheus.NewRegistry())
	o.MaxAttempts = 4
	o.RequestTimeout = 3 * time.Second
	return o
}

// hookSource streams like randSource and calls hook once after `at` bytes.
type hookSource struct {
	randSource
	at   int64
	hook func()
}

func (h *hookSource) WriteTo(w io.Writer) (int64, error) {
	var fired bool
	return h.randSource.WriteTo(writerFunc(func(b []byte) (int, error) {
		n, err := w.Write(b)
		if h.at -= int64(n); h.at <= 0 && !fired {
			fired = true
			h.hook()
		}
		return n, err
	}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestS3ServerStoppedDuringUpload(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	ctx := context.Background()
	o := faultOptions()
	o.Compression = encodingNone
	s := openT(t, srv.URL("stop"), o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 1, gens: []Generation{gen(1, false, 1, 100_000)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	big := Generation{ID: 1, Start: st.gens[0].Start, End: st.gens[0].End,
		Source: &hookSource{randSource: randSource{seed: 7, size: 24 << 20}, at: 8 << 20, hook: srv.Stop}}
	start := time.Now()
	_, err := p.Commit(ctx, state{offset: 2, gens: []Generation{big}}.checkpoint())
	if err == nil || errors.Is(err, ErrFenced) {
		t.Fatalf("commit with the server stopped mid-upload: %v", err)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("error does not wrap ErrUnavailable: %v", err)
	}
	t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if got := counter(t, p.m.failures); got != 1 {
		t.Errorf("failures_total = %v, want 1", got)
	}
	srv.Restart()
	restoreT(t, s, st) // the previous checkpoint, nothing partial
	st.offset = 3
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatalf("commit after restart: %v", err)
	}
	restoreT(t, s, st)
}

func TestS3TransientErrors(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	var n atomic.Int64
	proxy.Inject(func(r *http.Request) s3test.Fault {
		if n.Add(1)%2 == 0 { // every second request fails
			return s3test.Fault{Status: http.StatusServiceUnavailable}
		}
		return s3test.Fault{}
	})
	ctx := context.Background()
	o := faultOptions()
	o.MaxAttempts = 8
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "5xx"), o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	// 12 MiB incompressible: three parts of 5 MiB.
	st := state{offset: 1, gens: []Generation{gen(1, true, 1, 12<<20), gen(2, false, 2, 1000)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatalf("commit through 503s: %v", err)
	}
	restoreT(t, s, st)
	if proxy.Faults() == 0 {
		t.Fatal("no fault injected")
	}
	t.Logf("%d requests, %d answered 503", proxy.Requests(), proxy.Faults())
	if got := counter(t, p.m.failures); got != 0 {
		t.Errorf("failures_total = %v, want 0", got)
	}
}

// TestS3LostResponse: the manifest write reaches the server but the client
// sees a 500; the retry finds the object and recognises it as its own.
func TestS3LostResponse(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	var once atomic.Bool
	proxy.Inject(func(r *http.Request) s3test.Fault {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") && once.CompareAndSwap(false, true) {
			return s3test.Fault{Status: http.StatusInternalServerError, AfterForward: true}
		}
		return s3test.Fault{}
	})
	ctx := context.Background()
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "lost"), faultOptions())
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatalf("claim with a lost response: %v", err)
	}
	if !once.Load() {
		t.Fatal("no fault injected")
	}
	st := state{offset: 1, gens: []Generation{gen(1, false, 1, 1000)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	restoreT(t, s, st)
}

// TestS3TruncatedTransfer: a download cut short is resumed, not mistaken for
// a corrupt object.
func TestS3TruncatedTransfer(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	ctx := context.Background()
	o := faultOptions()
	o.Compression = encodingNone
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "trunc"), o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 1, gens: []Generation{gen(1, false, 1, 3<<20)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	var cuts atomic.Int64
	proxy.Inject(func(r *http.Request) s3test.Fault {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/gens/") && cuts.Add(1) <= 2 {
			return s3test.Fault{TruncateBody: 1 << 20}
		}
		return s3test.Fault{}
	})
	q, _ := restoreT(t, s, st)
	if cuts.Load() < 3 {
		t.Fatalf("%d GETs of the object, want the cut ones plus a resume", cuts.Load())
	}
	if got := counter(t, q.m.fallbacks); got != 0 {
		t.Fatalf("fallbacks_total = %v: a cut transfer is not corruption", got)
	}
}

// TestS3Unavailable: an unreachable store is an error of its own, never a
// reason to fall back or to report "no usable checkpoint".
func TestS3Unavailable(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	ctx := context.Background()
	o := faultOptions()
	o.MaxAttempts = 2
	s := openT(t, srv.URL("down"), o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, state{offset: 1, gens: []Generation{gen(1, false, 1, 1000)}}.checkpoint()); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	noBucket := openT(t, strings.Replace(srv.URL("x"), "s3://"+s3test.Bucket, "s3://no-such-bucket", 1), o)
	if err := noBucket.Ping(ctx); err == nil {
		t.Fatal("ping of a missing bucket succeeded")
	}
	srv.Stop()
	if err := s.Ping(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ping of a stopped server: %v", err)
	}
	q := s.Partition("g", "t", 0)
	_, err := q.Restore(ctx, loadAll(new([][32]byte)))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoUsableCheckpoint) || errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("restore from a stopped server: %v", err)
	}
	if _, err := Inspect(ctx, s); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("inspect of a stopped server: %v", err)
	}
	// Cancellation is not a failure.
	before := counter(t, q.m.failures)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Partition("g", "t", 0).Restore(cctx, loadAll(new([][32]byte))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled restore: %v", err)
	}
	if got := counter(t, q.m.failures); got != before {
		t.Fatalf("cancellation counted as failure (%v -> %v)", before, got)
	}
}

// TestS3AccessDeniedIsNotCorruption: a store refusing reads must not make
// Restore fall back to older state (or report "no usable checkpoint", which
// a caller may answer by starting empty).
func TestS3AccessDeniedIsNotCorruption(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	ctx := context.Background()
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "denied"), faultOptions())
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := p.Commit(ctx, state{offset: int64(i), gens: []Generation{gen(1, false, uint64(i), 1000)}}.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/gens/", "/manifests/"} {
		proxy.Inject(func(r *http.Request) s3test.Fault {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, path) {
				return s3test.Fault{Status: http.StatusForbidden}
			}
			return s3test.Fault{}
		})
		q := s.Partition("g", "t", 0)
		_, err := q.Restore(ctx, loadAll(new([][32]byte)))
		if err == nil || errors.Is(err, ErrNoUsableCheckpoint) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("restore with %s denied: %v", path, err)
		}
		if got := counter(t, q.m.fallbacks); got != 0 {
			t.Fatalf("%s denied: %v fallbacks", path, got)
		}
	}
}

// TestS3StalledDownload: a server that stops sending mid-body is detected
// by the per-read watchdog and the download resumes.
func TestS3StalledDownload(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	ctx := context.Background()
	o := faultOptions()
	o.RequestTimeout = 300 * time.Millisecond
	o.Compression = encodingNone
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "stall"), o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 1, gens: []Generation{gen(1, false, 1, 2<<20)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	var stalled atomic.Bool
	proxy.Inject(func(r *http.Request) s3test.Fault {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/gens/") && stalled.CompareAndSwap(false, true) {
			return s3test.Fault{TruncateBody: 256 << 10, Stall: 20 * time.Second}
		}
		return s3test.Fault{}
	})
	start := time.Now()
	restoreT(t, s, st)
	if !stalled.Load() {
		t.Fatal("no stall injected")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("restore took %s: stall not detected", d)
	}
}
