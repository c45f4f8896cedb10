package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/s3test"
)

// faultBucket wraps a bucket and misbehaves as configured.
type faultBucket struct {
	bucket
	ignoreCreateOnly bool              // a store without conditional writes
	replaceAnyway    bool              // answers "exists" to a create-only write, but writes
	putErr           func(n int) error // error for the n-th Put (1-based), nil: pass
	deleteErr        error
	puts             atomic.Int64
}

func (b *faultBucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error) {
	n := int(b.puts.Add(1))
	if b.putErr != nil {
		if err := b.putErr(n); err != nil {
			return 0, err
		}
	}
	if b.replaceAnyway && createOnly {
		if _, err := b.bucket.Attributes(ctx, key); err == nil {
			if _, err := b.bucket.Put(ctx, key, r, false); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("put %s: %w", key, errExists)
		}
	}
	return b.bucket.Put(ctx, key, r, createOnly && !b.ignoreCreateOnly)
}

func (b *faultBucket) Delete(ctx context.Context, key string) error {
	if b.deleteErr != nil {
		return b.deleteErr
	}
	return b.bucket.Delete(ctx, key)
}

// syncBuffer is a log sink for tests.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func loggedOptions(logs *syncBuffer) Options {
	o := testOptions(prometheus.NewRegistry())
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return o
}

// testProbe: the create-only check passes on a store that honours
// create-only writes, logs how long it took, and leaves nothing behind.
func testProbe(t *testing.T, url string) {
	url = fixURL(url)
	var logs syncBuffer
	s := openT(t, url, loggedOptions(&logs))
	start := time.Now()
	if err := s.VerifyCreateOnly(context.Background()); err != nil {
		t.Fatalf("create-only check: %v", err)
	}
	t.Logf("create-only check took %s", time.Since(start))
	if !strings.Contains(logs.String(), "level=INFO msg=\"checkpoint store honours create-only writes\"") ||
		!strings.Contains(logs.String(), " took=") {
		t.Errorf("no info line with the duration:\n%s", logs.String())
	}
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("objects left after the check: %v", keys)
	}
}

// testProbeLeftover: when deleting the probe object fails, the check still
// passes (with a warning), and the leftover changes nothing for Restore,
// retention and Inspect — even for a group named like the probe directory.
func testProbeLeftover(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	var logs syncBuffer
	o := loggedOptions(&logs)
	o.Retain = 1
	o.OrphanGrace = time.Nanosecond
	s := openT(t, url, o)
	inner := s.bkt
	s.bkt = &faultBucket{bucket: inner, deleteErr: errors.New("AccessDenied: delete not allowed")}
	if err := s.VerifyCreateOnly(ctx); err != nil {
		t.Fatalf("create-only check with delete failing: %v", err)
	}
	s.bkt = inner
	if !strings.Contains(logs.String(), "deleting probe object failed") || !strings.Contains(logs.String(), "delete not allowed") {
		t.Errorf("no warning naming the failed delete:\n%s", logs.String())
	}
	left := listKeys(t, s, probeDir+"/")
	if len(left) != 1 {
		t.Fatalf("probe objects left: %v, want 1", left)
	}

	if _, err := Inspect(ctx, s); !errors.Is(err, ErrEmptyLocation) {
		t.Fatalf("inspect of a location holding only a probe leftover: %v, want ErrEmptyLocation", err)
	}
	p := s.Partition(probeDir, "t", 0)
	if _, err := p.Restore(ctx, loadAll(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("restore next to a probe leftover: %v, want ErrNoCheckpoint", err)
	}
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 7, gens: []Generation{gen(1, false, 1, 1000)}}
	for i := 0; i < 3; i++ { // retention runs after each commit
		st.offset++
		if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if strings.Contains(logs.String(), "retention failed") {
		t.Errorf("retention failed next to a probe leftover:\n%s", logs.String())
	}
	q := s.Partition(probeDir, "t", 0)
	var got [][32]byte
	m, err := q.Restore(ctx, loadAll(&got))
	if err != nil || m.InputOffset != st.offset {
		t.Fatalf("restore: %v (manifest %+v)", err, m)
	}
	rep, err := Inspect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) != 1 || rep.Partitions[0].Group != probeDir || rep.Partitions[0].Error != "" ||
		rep.Partitions[0].Seq != 4 || rep.Partitions[0].Manifests != 1 {
		t.Fatalf("inspect: %+v", rep.Partitions)
	}
	if _, err := s.bkt.Attributes(ctx, left[0]); err != nil {
		t.Fatalf("retention touched the probe leftover: %v", err)
	}
}

// TestProbeRefusesOverwritingStore: a store that lets a create-only write
// replace an object fails the check with ErrCreateOnlyIgnored and a message
// naming the store without its credentials.
func TestProbeRefusesOverwritingStore(t *testing.T) {
	s := openT(t, "mem://alice:secret@probe-overwrite/prefix", testOptions(nil))
	s.bkt = &faultBucket{bucket: s.bkt, ignoreCreateOnly: true}
	err := s.VerifyCreateOnly(context.Background())
	if !errors.Is(err, ErrCreateOnlyIgnored) {
		t.Fatalf("check on an overwriting store: %v, want ErrCreateOnlyIgnored", err)
	}
	msg := err.Error()
	for _, want := range []string{"mem://probe-overwrite/prefix", "fencing cannot work", "second create-only write"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("error shows the credentials: %s", msg)
	}
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("objects left after the failed check: %v", keys)
	}
}

// TestProbeRefusesReplacingStore: a store that answers "already exists" but
// replaced the object anyway fails the check too.
func TestProbeRefusesReplacingStore(t *testing.T) {
	s := openT(t, "mem://probe-replace/prefix", testOptions(nil))
	s.bkt = &faultBucket{bucket: s.bkt, replaceAnyway: true}
	err := s.VerifyCreateOnly(context.Background())
	if !errors.Is(err, ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), "replaced its content anyway") {
		t.Fatalf("check on a store replacing despite 'exists': %v", err)
	}
}

// TestProbeErrorsNameTheStep: a failure of the first or of the second create
// says which, and is not ErrCreateOnlyIgnored.
func TestProbeErrorsNameTheStep(t *testing.T) {
	denied := errors.New("AccessDenied")
	for _, tt := range []struct {
		name   string
		failAt int
		want   string
	}{
		{"first create", 1, "creating probe object"},
		{"second create", 2, "creating (second time, expecting \"already exists\") probe object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openT(t, "mem:///prefix", testOptions(nil))
			s.bkt = &faultBucket{bucket: s.bkt, putErr: func(n int) error {
				if n == tt.failAt {
					return denied
				}
				return nil
			}}
			err := s.VerifyCreateOnly(context.Background())
			if !errors.Is(err, denied) || errors.Is(err, ErrCreateOnlyIgnored) {
				t.Fatalf("check: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "mem:///prefix") {
				t.Fatalf("error %q lacks %q or the store", err, tt.want)
			}
		})
	}
}

// TestS3ProbeIgnoredIfNoneMatch: versitygw behind a proxy that drops
// If-None-Match (a gateway that ignores conditional writes) fails the check.
func TestS3ProbeIgnoredIfNoneMatch(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	proxy.Inject(func(*http.Request) s3test.Fault { return s3test.Fault{StripIfNoneMatch: true} })
	s := openT(t, s3test.URLFor(proxy.Endpoint(), "strip"), faultOptions())
	err := s.VerifyCreateOnly(context.Background())
	if !errors.Is(err, ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), proxy.Endpoint()) {
		t.Fatalf("check behind a proxy dropping If-None-Match: %v", err)
	}
	if proxy.Faults() != 2 {
		t.Fatalf("%d requests stripped, want 2 (both creates)", proxy.Faults())
	}
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("objects left after the failed check: %v", keys)
	}
}

// TestS3ProbeFailures: access denied on the first or the second PUT, an
// answer lost after the first PUT was applied, a denied DELETE, and an
// unreachable store.
func TestS3ProbeFailures(t *testing.T) {
	srv := s3test.Start(t)
	s3test.SetEnv(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint())
	ctx := context.Background()
	nthPut := func(n int64, f s3test.Fault) func(*http.Request) s3test.Fault {
		var puts atomic.Int64
		return func(r *http.Request) s3test.Fault {
			if r.Method == http.MethodPut && puts.Add(1) == n {
				return f
			}
			return s3test.Fault{}
		}
	}
	for _, tt := range []struct {
		name   string
		inject func(*http.Request) s3test.Fault
		want   string // "" : the check passes
	}{
		{"first put denied", nthPut(1, s3test.Fault{Status: http.StatusForbidden}), "creating probe object"},
		{"second put denied", nthPut(2, s3test.Fault{Status: http.StatusForbidden}), "creating (second time"},
		{"first put answer lost", nthPut(1, s3test.Fault{Status: http.StatusInternalServerError, AfterForward: true}), ""},
		{"delete denied", func(r *http.Request) s3test.Fault {
			if r.Method == http.MethodDelete {
				return s3test.Fault{Status: http.StatusForbidden}
			}
			return s3test.Fault{}
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy.Inject(tt.inject)
			s := openT(t, s3test.URLFor(proxy.Endpoint(), "fail"), faultOptions())
			err := s.VerifyCreateOnly(ctx)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tt.want != "" && (err == nil || errors.Is(err, ErrCreateOnlyIgnored) ||
				!strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "403")):
				t.Fatalf("check: %v, want a 403 error containing %q", err, tt.want)
			}
			t.Logf("%v", err)
		})
	}

	start := time.Now()
	o := faultOptions()
	s := openT(t, s3test.URLFor("http://127.0.0.1:1", "down"), o)
	err := s.VerifyCreateOnly(ctx)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "creating probe object") ||
		!strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("check of an unreachable store: %v", err)
	}
	t.Logf("unreachable store: failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
}
