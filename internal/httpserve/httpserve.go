// Package httpserve serves the metrics and status endpoint (--metrics-addr:
// /metrics, /healthz, /readyz, the status page) with bounds on what its
// clients can hold.
//
// Before these bounds only the wait for a request's headers was limited
// (5 s): 1,000 clients that made one request each and kept the connection
// alive held 1,000 open files until they went away. Now a connection that
// sends no request is closed after ReadHeaderTimeout, one that waits
// between requests after IdleTimeout, reading a request and writing a
// response are bounded, a request's headers may take MaxHeaderBytes (more
// is answered 431), and at most MaxConns connections are open at once
// (golang.org/x/net/netutil.LimitListener): further clients wait in the
// kernel's accept queue, unserved, until a connection closes, so they cost
// no file descriptor of the process.
//
// Cost: one goroutine and one file descriptor per open connection, at most
// MaxConns of each.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The bounds of the endpoint, the defaults of Limits.
const (
	// DefaultReadHeaderTimeout: a new connection sends its request
	// headers within this time, or is closed.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request (the endpoint's
	// are GETs without a body).
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds a response, counted from the end of
	// reading its request: /metrics grows with the assigned partitions,
	// and a scraper may read it slowly.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection that sends no
	// next request: longer than the usual scrape intervals (15-30 s) and
	// the status page's reload (5 s), so scrapers and browsers keep theirs.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers (net/http's own
	// default is 1 MiB).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConns bounds the open connections: a Prometheus or two,
	// the probes, a few browsers need a handful.
	DefaultMaxConns = 256
	// ShutdownGrace is how long Run lets requests in flight finish once
	// its context ends, before it closes their connections.
	ShutdownGrace = 2 * time.Second
)

// Limits bounds a Server. A zero (or negative) field takes its default.
type Limits struct {
	ReadHeaderTimeout time.Duration // DefaultReadHeaderTimeout
	ReadTimeout       time.Duration // DefaultReadTimeout
	WriteTimeout      time.Duration // DefaultWriteTimeout
	IdleTimeout       time.Duration // DefaultIdleTimeout
	MaxHeaderBytes    int           // DefaultMaxHeaderBytes
	MaxConns          int           // DefaultMaxConns
}

func (l Limits) withDefaults() Limits {
	orDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	orInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	orDur(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	orDur(&l.ReadTimeout, DefaultReadTimeout)
	orDur(&l.WriteTimeout, DefaultWriteTimeout)
	orDur(&l.IdleTimeout, DefaultIdleTimeout)
	orInt(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	orInt(&l.MaxConns, DefaultMaxConns)
	return l
}

// Server serves one handler on one listener within Limits.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// New returns a Server for h on ln. It starts nothing; Run serves.
func New(ln net.Listener, h http.Handler, lim Limits) *Server {
	lim = lim.withDefaults()
	return &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: lim.ReadHeaderTimeout,
			ReadTimeout:       lim.ReadTimeout,
			WriteTimeout:      lim.WriteTimeout,
			IdleTimeout:       lim.IdleTimeout,
			MaxHeaderBytes:    lim.MaxHeaderBytes,
		},
		ln: netutil.LimitListener(ln, lim.MaxConns),
	}
}

// Run serves until ctx ends, then stops accepting, lets requests in flight
// finish for up to ShutdownGrace, closes every connection and returns nil.
// It closes the listener. If serving fails first (the listener was
// closed), it returns that error.
func (s *Server) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close() // the grace is over: close what is still open
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", s.ln.Addr(), err)
	}
	return nil
}
