package memory

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const tIn = "in"

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

// openState opens the checkpoint store at url with the real filter.
func openState(t *testing.T, url string, log *slog.Logger) *Store {
	t.Helper()
	st, err := checkpoint.Open(context.Background(), url, checkpoint.Options{Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("opening checkpoint store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return New(st, "g")
}

// realState opens a file:// checkpoint store in dir.
func realState(t *testing.T, dir string) *Store { return openState(t, "file://"+dir, testLogger(t)) }

// shard is the filter's bloom.Shard (the ring kind, in exact mode or not).
func (f *filter) shard() *bloom.Shard { return unwrap(f.k).(ring).Shard }

// fpShard is the filter's bloom.FingerprintShard (the fingerprint kind).
func (f *filter) fpShard() *bloom.FingerprintShard { return unwrap(f.k).(tables).FingerprintShard }

// unwrap is k without exact mode's wrapper.
func unwrap(k kind) kind {
	if x, ok := k.(*exactKind); ok {
		return x.kind
	}
	return k
}
