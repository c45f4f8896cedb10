//go:build pprof

package main

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/bloomgate/bloomgate/internal/httpserve"
)

// Built with -tags pprof (bench/pipeline -pprof does), the process serves
// net/http/pprof on BLOOMGATE_PPROF_ADDR and prints the address it bound
// on stderr. Release builds have none of this.
func init() {
	addr := os.Getenv("BLOOMGATE_PPROF_ADDR")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Stderr.WriteString("pprof: " + err.Error() + "\n")
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	os.Stderr.WriteString("pprof listening on " + ln.Addr().String() + "\n")
	// The endpoint's bounds, but time for a CPU profile of the default 30 s
	// (pprof refuses one as long as the write timeout).
	srv := httpserve.New(ln, mux, httpserve.Limits{WriteTimeout: 2 * time.Minute})
	go func() { _ = srv.Run(context.Background()) }()
}
