package worker

import (
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/internal/group"
	"github.com/bloomgate/bloomgate/internal/quantity"
)

// The rules of the worker's durations, in the words `bloomgate run` shows
// after a setting's name. internal/config checks its settings with them,
// and Validate checks a Config's as the worker would run them (defaults
// filled in), so that timings one accepts the other accepts.

// CheckPositive returns nil for a positive duration d, else what is wrong,
// with example (the setting's default, as a rule) as a value that works.
func CheckPositive(d, example time.Duration) error {
	if d > 0 {
		return nil
	}
	return fmt.Errorf("%s: must be positive (e.g. %s)", quantity.Duration(d), quantity.Duration(example))
}

// CheckSessionTimeout returns nil for a positive session timeout, else what
// is wrong, with the range brokers accept by default (their
// group.min.session.timeout.ms and group.max.session.timeout.ms).
func CheckSessionTimeout(session time.Duration) error {
	if session > 0 {
		return nil
	}
	return fmt.Errorf("%s: must be positive (e.g. %s; brokers accept 6s-30m by default)",
		quantity.Duration(session), quantity.Duration(DefaultSessionTimeout))
}

// CheckHeartbeatInterval returns nil for a positive heartbeat interval
// below the session timeout (or any positive one when the session timeout
// is itself not positive, which CheckSessionTimeout reports), else what is
// wrong.
func CheckHeartbeatInterval(heartbeat, session time.Duration) error {
	if heartbeat > 0 && (session <= 0 || heartbeat < session) {
		return nil
	}
	return fmt.Errorf("%s: must be positive and below --session-timeout (%s), e.g. a third of it or less",
		quantity.Duration(heartbeat), quantity.Duration(session))
}

// CheckRebalanceTimeout returns nil for a rebalance timeout of 0 (the
// session timeout plus 10s) or above the session timeout, else what is
// wrong.
func CheckRebalanceTimeout(rebalance, session time.Duration) error {
	if rebalance == 0 || (rebalance > 0 && rebalance > session) {
		return nil
	}
	return fmt.Errorf("%s: must exceed --session-timeout (%s), since members revoke within the session timeout and the rebalance waits for them; or 0 for session-timeout + %s",
		quantity.Duration(rebalance), quantity.Duration(session), quantity.Duration(group.RebalanceOverSession))
}

// CheckCheckpointStaleness returns nil when a positive staleness bound is
// at least the checkpoint interval, else what is wrong: below it, commits
// would stop between two healthy checkpoints. A bound that is not positive
// (none, or the default) and an interval that is not positive (reported
// by CheckPositive) are not its concern.
func CheckCheckpointStaleness(staleness, interval time.Duration) error {
	if staleness <= 0 || interval <= 0 || staleness >= interval {
		return nil
	}
	return fmt.Errorf("%s is shorter than --checkpoint-interval %s: commits would stop between two healthy checkpoints; use at least the interval (e.g. 10x)",
		quantity.Duration(staleness), quantity.Duration(interval))
}
