package s3test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Fault says what the proxy does with one request.
type Fault struct {
	// Status, when non-zero and AfterForward is false, answers the request
	// with this status and an S3-style error body without forwarding it.
	Status int
	// AfterForward forwards the request first (so the server applies it) and
	// then answers with Status instead of the server's response: the write
	// happened but the client sees an error, as after a lost response.
	AfterForward bool
	// TruncateBody > 0 forwards the request, sends the server's headers and
	// only the first TruncateBody bytes of the body, then drops the
	// connection.
	TruncateBody int64
	// Stall, with TruncateBody, holds the connection open without sending
	// anything for this long (or until the client gives up) before dropping
	// it: a server that hangs mid-body.
	Stall time.Duration
	// StripIfNoneMatch forwards the request without its If-None-Match
	// header, signed again with the test credentials: a gateway or store
	// that ignores create-only writes, so a second create overwrites.
	StripIfNoneMatch bool
}

// FaultProxy is a reverse proxy on 127.0.0.1 in front of an S3 endpoint that
// injects faults chosen per request. It keeps the Host header so that
// signatures made for the proxy's address stay valid.
type FaultProxy struct {
	srv      *httptest.Server
	mu       sync.Mutex
	inject   func(r *http.Request) Fault
	requests atomic.Int64
	faults   atomic.Int64
}

// NewFaultProxy starts a proxy forwarding to endpoint (e.g. Server.Endpoint())
// and closes it when the test ends. Without Inject it forwards everything.
func NewFaultProxy(t testing.TB, endpoint string) *FaultProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("parsing endpoint %q: %v", endpoint, err)
	}
	p := &FaultProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = nil
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		p.mu.Lock()
		inject := p.inject
		p.mu.Unlock()
		var f Fault
		if inject != nil {
			f = inject(r)
		}
		switch {
		case f.Status != 0 && !f.AfterForward:
			p.faults.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			writeS3Error(w, f.Status)
		case f.Status != 0 && f.AfterForward:
			p.faults.Add(1)
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			writeS3Error(w, f.Status)
		case f.TruncateBody > 0:
			p.faults.Add(1)
			// The proxy aborts the connection itself when the body copy
			// fails (it panics with http.ErrAbortHandler); just in case:
			rp.ServeHTTP(&truncatingWriter{ResponseWriter: w, left: f.TruncateBody, stall: f.Stall, done: r.Context().Done()}, r)
			panic(http.ErrAbortHandler) // drop the connection mid-body
		case f.StripIfNoneMatch && r.Header.Get("If-None-Match") != "":
			p.faults.Add(1)
			r.Header.Del("If-None-Match")
			if err := resign(r); err != nil {
				writeS3Error(w, http.StatusInternalServerError)
				return
			}
			rp.ServeHTTP(w, r)
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// Endpoint is the proxy's base URL, to use instead of the server's.
func (p *FaultProxy) Endpoint() string { return p.srv.URL }

// Inject sets the function choosing a fault per request (nil: none).
func (p *FaultProxy) Inject(fn func(r *http.Request) Fault) {
	p.mu.Lock()
	p.inject = fn
	p.mu.Unlock()
}

// Requests is the number of requests seen; Faults the number of faults
// injected.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Faults is the number of requests that got a fault.
func (p *FaultProxy) Faults() int64 { return p.faults.Load() }

// resign replaces the request's SigV4 signature by one over its current
// headers, made with the test credentials (the server checks every header
// the client signed, so a changed header needs a new signature).
func resign(r *http.Request) error {
	r.Header.Del("Authorization")
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	creds := aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}
	return v4.NewSigner().SignHTTP(r.Context(), creds, r, payload, "s3", Region, time.Now(),
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }) // as S3 signs
}

func writeS3Error(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected fault</Message></Error>`)
}

type truncatingWriter struct {
	http.ResponseWriter
	left  int64
	stall time.Duration
	done  <-chan struct{}
}

func (t *truncatingWriter) Write(p []byte) (int, error) {
	if t.left <= 0 {
		return 0, io.ErrClosedPipe
	}
	if int64(len(p)) > t.left {
		p = p[:t.left]
	}
	n, err := t.ResponseWriter.Write(p)
	t.left -= int64(n)
	if err == nil && t.left <= 0 {
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		if t.stall > 0 {
			select {
			case <-time.After(t.stall):
			case <-t.done:
			}
		}
		return n, io.ErrClosedPipe
	}
	return n, err
}
