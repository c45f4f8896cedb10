package brokercheck

import (
	"context"
	"errors"
	"fmt"
	"github.com/bloomgate/bloomgate/internal/saslauth"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"
)

// StartupBound bounds how long a component retries brokers that do not
// answer at start: long enough for a broker restart, short enough that a
// wrong address is reported while someone is watching.
const StartupBound = time.Minute

// bound is how long Retry retries: Client.Bound, or StartupBound.
func (c *Client) bound() time.Duration {
	if c.Bound > 0 {
		return c.Bound
	}
	return StartupBound
}

// Retry calls fn, one exchange with the brokers, until it succeeds. A
// failure that waiting does not fix (Explain, or a TLS mismatch shown by a
// probe) is returned at once as an *Error; other failures are retried with
// a growing wait (200 ms to 5 s) for Client.Bound (StartupBound), then reported with the
// attempts, the last failure and what to check. Each retry is logged as a
// warning on log. It returns early with an error if ctx ends.
func (c *Client) Retry(ctx context.Context, log *slog.Logger, fn func(context.Context) error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	deadline := start.Add(c.bound())
	probed := map[string]bool{}
	wait := 200 * time.Millisecond
	for attempts := 1; ; attempts++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("--brokers %s: %w", strings.Join(c.Brokers, ","), err)
		}
		if e := c.Explain(err); e != nil {
			e.Attempts = attempts
			return e
		}
		var se *stepError
		if errors.As(err, &se) && !probed[se.addr] {
			probed[se.addr] = true
			if e := c.probe(ctx, err); e != nil {
				e.Attempts = attempts
				return e
			}
		}
		now := time.Now()
		if now.After(deadline) {
			return c.unreachable(attempts, now.Sub(start), err)
		}
		d := min(wait, time.Until(deadline)+time.Millisecond)
		log.Warn("brokers unreachable; retrying until the start-up bound, then stopping",
			"brokers", c.Brokers, "err", err, "retry_in", d.Round(time.Millisecond),
			"start_up_bound", c.bound(), "gives_up_in", time.Until(deadline).Round(time.Second))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("--brokers %s: %w", strings.Join(c.Brokers, ","), err)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// unreachable is the error after the start-up retries: what was tried, for
// how long, the last failure, and what to check.
func (c *Client) unreachable(attempts int, tried time.Duration, last error) error {
	return fmt.Errorf("--brokers %s: no broker answered in %d attempts over %s (the start-up bound is %s); last error: %w; %s",
		strings.Join(c.Brokers, ","), attempts, tried.Round(time.Second), c.bound(), last, c.check(last))
}

// check says what to look at after the retries, from the last failure:
// what it shows for certain (a name that does not resolve), or what it may
// mean (a listener in another protocol), else the addresses.
func (c *Client) check(last error) string {
	var dnsErr *net.DNSError
	if errors.As(last, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Sprintf("check the host name %q, which does not resolve", dnsErr.Name)
	}
	var te *saslauth.TransientError
	if errors.As(last, &te) {
		return "the credentials could not be obtained: check " + te.Settings
	}
	var se *stepError
	if errors.As(last, &se) {
		closed := errors.Is(se.err, io.EOF) || errors.Is(se.err, io.ErrUnexpectedEOF) || errors.Is(se.err, syscall.ECONNRESET)
		switch {
		case se.step == stepTLSHandshake && silentOrClosed(se.err):
			return "the TLS handshake got no answer: the listener may be plaintext (drop --tls-enabled) or the port " +
				"may be another service's; else check that this host can reach the brokers"
		case se.step == stepAPIVersions && c.TLS == nil && closed:
			return "the brokers closed the connection at the first request: their listener may expect TLS " +
				"(set --tls-enabled, and --tls-ca-file if its CA is private); else check the addresses"
		case se.step == stepSASL && closed:
			return "the brokers closed the connection during SASL authentication: their listener may not expect SASL " +
				"(drop --sasl-mechanism or use the brokers' SASL port), or they close instead of answering a refused login " +
				"(check --sasl-username and " + PasswordSource + ")"
		case se.step == stepMetadata && c.SASL == nil && closed:
			return "the brokers answered the first request and closed the connection at the next: their listener may " +
				"require SASL (set --sasl-mechanism, --sasl-username and " + PasswordSource + ")"
		}
	}
	return "check the addresses and that this host can reach the brokers"
}

// Unreachable reports whether err is a failure to reach a broker at all (a
// refused or reset connection, a timeout, a name that does not resolve, a
// connection closed before an answer), as opposed to a broker's answer.
func Unreachable(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var netErr net.Error
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
