//go:build pprof

package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"os"
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
	go func() { _ = http.Serve(ln, mux) }()
}
