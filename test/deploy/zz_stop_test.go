package deploy

import (
	"strings"
	"syscall"
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
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, w.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit within 20s of SIGTERM (shutdown-timeout 10s)")
	}
	if !strings.Contains(w.stderr.String(), "stopped") {
		t.Errorf("no orderly stop in the log:\n%s", w.stderr.String())
	}
}
