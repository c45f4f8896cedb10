package httpserve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run the real server on 127.0.0.1 with real time: its bounds
// are socket deadlines, which testing/synctest's clock does not drive. The
// timeouts are short and the waits for what must happen generous; only the
// checks that something does not happen wait a fixed time.

// countingListener counts the connections the server has accepted and not
// closed yet, and the most at once.
type countingListener struct {
	net.Listener
	open, most atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// start serves "ok" within lim on 127.0.0.1 until the test ends.
func start(t *testing.T, lim Limits) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	s := New(cl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), lim)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return cl
}

// client is one keep-alive connection.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr net.Addr) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, extraHeaders string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n"+extraHeaders+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// response reads one response, its body included, within d.
func (c *client) response(d time.Duration) (*http.Response, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return resp, err
}

// TestConnectionLimit: with MaxConns idle keep-alive connections open,
// further clients are not served — not even accepted — until one closes;
// never more than MaxConns connections are open.
func TestConnectionLimit(t *testing.T) {
	const limit = 4
	ln := start(t, Limits{MaxConns: limit, IdleTimeout: time.Hour})
	idle := make([]*client, limit)
	for i := range idle {
		idle[i] = dial(t, ln.Addr())
		idle[i].send(t, "")
		if _, err := idle[i].response(5 * time.Second); err != nil {
			t.Fatalf("connection %d within the limit: %v", i, err)
		}
	}
	excess := make([]*client, limit)
	served := make(chan int, len(excess))
	for i := range excess {
		excess[i] = dial(t, ln.Addr()) // the kernel completes the handshake
		excess[i].send(t, "")
		go func() {
			if _, err := excess[i].response(10 * time.Second); err == nil {
				served <- i
			}
		}()
	}
	select {
	case i := <-served:
		t.Fatalf("connection %d beyond the limit served while %d idle ones are open", limit+i, limit)
	case <-time.After(300 * time.Millisecond):
	}
	// Each idle connection that goes lets exactly one waiting client in,
	// which then holds the place itself.
	for i := range idle {
		idle[i].Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatalf("closing idle connection %d served no waiting client", i)
		}
		select {
		case j := <-served:
			t.Fatalf("closing one connection served two waiting clients (the second %d)", j)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if m := ln.most.Load(); m > limit {
		t.Errorf("%d connections open at once, limit %d", m, limit)
	}
}

// TestIdleConnectionsClosed: a keep-alive connection without a next
// request is closed after IdleTimeout, which frees its place for a waiting
// client; one that never sends a request after ReadHeaderTimeout.
func TestIdleConnectionsClosed(t *testing.T) {
	const idleTimeout = 200 * time.Millisecond
	ln := start(t, Limits{MaxConns: 2, IdleTimeout: idleTimeout, ReadHeaderTimeout: idleTimeout})
	a, b := dial(t, ln.Addr()), dial(t, ln.Addr())
	a.send(t, "")
	if _, err := a.response(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	// b sends nothing; c waits for a place.
	c := dial(t, ln.Addr())
	c.send(t, "")
	for name, cl := range map[string]*client{"idle keep-alive": a, "silent": b} {
		_ = cl.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := cl.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s connection: read %v, want EOF (closed by the server)", name, err)
		}
	}
	if d := time.Since(answered); d < idleTimeout-20*time.Millisecond {
		t.Errorf("closed %v after the response, before the idle timeout %v", d, idleTimeout)
	}
	if _, err := c.response(5 * time.Second); err != nil {
		t.Fatalf("waiting client after the idle ones closed: %v", err)
	}
	if ln.most.Load() > 2 {
		t.Errorf("%d connections open at once, limit 2", ln.most.Load())
	}
}

// TestHeaderBound: request headers beyond MaxHeaderBytes are refused with
// 431; within it, served.
func TestHeaderBound(t *testing.T) {
	ln := start(t, Limits{})
	for _, tc := range []struct {
		size int
		want int
	}{
		{DefaultMaxHeaderBytes / 2, http.StatusOK},
		{2 * DefaultMaxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
	} {
		c := dial(t, ln.Addr())
		c.send(t, "X-Pad: "+strings.Repeat("a", tc.size)+"\r\n")
		// The server closes after a 431 with the rest of the request
		// unread, so the body may end in a reset: the status is what counts.
		resp, err := c.response(5 * time.Second)
		if resp == nil || resp.StatusCode != tc.want {
			t.Errorf("%d-byte header: %v %v, want %d", tc.size, resp, err, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := New(ln, http.NotFoundHandler(), Limits{ReadTimeout: -1}).srv
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout ||
		srv.WriteTimeout != DefaultWriteTimeout || srv.IdleTimeout != DefaultIdleTimeout ||
		srv.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("server %+v: not the defaults", srv)
	}
}

// TestRunStops: Run returns nil once its context ends and closes the
// listener; a listener closed under it is an error.
func TestRunStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(ln, http.NotFoundHandler(), Limits{}).Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Errorf("listener still open after Run returned")
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- New(ln, http.NotFoundHandler(), Limits{}).Run(context.Background()) }()
	ln.Close()
	if err := <-done; err == nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Run on a closed listener: %v, want net.ErrClosed", err)
	}
}
