package main

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsAddrInUse: a second worker on one host fails on the metrics
// port with an error that names --metrics-addr and the fix.
func TestMetricsAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop, err := serveHTTP(ln.Addr().String(), http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if err == nil {
		stop()
		t.Fatal("a port in use was accepted")
	}
	for _, want := range []string{"--metrics-addr " + ln.Addr().String() + " is in use", "its own --metrics-addr", "host:0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
