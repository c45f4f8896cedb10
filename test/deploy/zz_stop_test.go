package deploy

import (
	"strings"
	"testing"
	"time"
)

// TestZZGracefulStop runs last (this file sorts last): SIGTERM stops the shared worker
// in time with exit code 0.
func TestZZGracefulStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and the binary; not in -short")
	}
	w := startWorker(t)
	if err := w.proc.Stop(20 * time.Second); err != nil {
		t.Fatalf("%v (shutdown-timeout 10s)\n%s", err, w.proc.Output())
	}
	if !strings.Contains(w.proc.Output(), "stopped") {
		t.Errorf("no orderly stop in the log:\n%s", w.proc.Output())
	}
}
