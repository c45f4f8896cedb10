package proctest

import (
	"net"
	"regexp"
	"testing"
	"time"
)

// BrokerListening matches the line `bloomgate broker` prints once it
// accepts connections; the submatch is its address.
var BrokerListening = regexp.MustCompile(`broker listening on (\S+)`)

// StartBroker runs `bin broker --listen 127.0.0.1:0 args…` for test t and
// waits up to limit for its address; see Start for the cleanup.
func StartBroker(t testing.TB, bin string, limit time.Duration, args ...string) (*Proc, string) {
	t.Helper()
	p := Start(t, Config{Name: "broker", Path: bin, Args: append([]string{"broker", "--listen", "127.0.0.1:0"}, args...)})
	addr, err := p.WaitFor(BrokerListening, limit)
	if err != nil {
		t.Fatal(err)
	}
	return p, addr
}

// FreeAddr returns a 127.0.0.1:PORT address that was free a moment ago, for
// a process that must listen on a port known in advance (e.g. one that is
// restarted on the same address).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
