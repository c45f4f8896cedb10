package worker

import (
	"fmt"
	"testing"
	"time"
)

// TestCheckTimings: the edges of each timing rule, and the words, which
// are those `bloomgate run` shows after the setting's name.
func TestCheckTimings(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name string
		err  error
		want string // "" if accepted
	}{
		{"positive", CheckPositive(time.Nanosecond, s), ""},
		{"zero", CheckPositive(0, time.Minute), "0s: must be positive (e.g. 1m)"},
		{"negative", CheckPositive(-s, 30*s), "-1s: must be positive (e.g. 30s)"},
		{"session", CheckSessionTimeout(time.Nanosecond), ""},
		{"session zero", CheckSessionTimeout(0), "0s: must be positive (e.g. 10s; brokers accept 6s-30m by default)"},
		{"heartbeat below session", CheckHeartbeatInterval(10*s-1, 10*s), ""},
		{"heartbeat without a session", CheckHeartbeatInterval(s, 0), ""},
		{"heartbeat at session", CheckHeartbeatInterval(10*s, 10*s), "10s: must be positive and below --session-timeout (10s), e.g. a third of it or less"},
		{"heartbeat zero", CheckHeartbeatInterval(0, 10*s), "0s: must be positive and below --session-timeout (10s), e.g. a third of it or less"},
		{"rebalance default", CheckRebalanceTimeout(0, 10*s), ""},
		{"rebalance above session", CheckRebalanceTimeout(10*s+1, 10*s), ""},
		{"rebalance at session", CheckRebalanceTimeout(10*s, 10*s), "10s: must exceed --session-timeout (10s), since members revoke within the session timeout and the rebalance waits for them; or 0 for session-timeout + 10s"},
		{"rebalance negative", CheckRebalanceTimeout(-s, 10*s), "-1s: must exceed --session-timeout (10s), since members revoke within the session timeout and the rebalance waits for them; or 0 for session-timeout + 10s"},
		{"staleness at interval", CheckCheckpointStaleness(time.Minute, time.Minute), ""},
		{"staleness off", CheckCheckpointStaleness(NoBound, time.Minute), ""},
		{"staleness without an interval", CheckCheckpointStaleness(s, 0), ""},
		{"staleness below interval", CheckCheckpointStaleness(30*s, time.Minute),
			"30s is shorter than --checkpoint-interval 1m: commits would stop between two healthy checkpoints; use at least the interval (e.g. 10x)"},
	} {
		got := ""
		if tc.err != nil {
			got = fmt.Sprint(tc.err)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
