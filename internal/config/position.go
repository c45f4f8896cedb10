package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Position is a parsed --start-from / --seed-from value: earliest, latest,
// an RFC 3339 time, or a duration before now ("72h", "3d", "2w").
type Position struct {
	Latest bool
	At     time.Time
	Ago    time.Duration
}

// IsEarliest reports whether p names the earliest retained record.
func (p Position) IsEarliest() bool { return p == Position{} }

// ParsePosition parses a position; the error shows the accepted forms.
func ParsePosition(s string) (Position, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "earliest", "":
		return Position{}, nil
	case "latest":
		return Position{Latest: true}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return Position{At: t}, nil
	}
	if d, ok := agoDuration(s); ok {
		if d <= 0 {
			return Position{}, fmt.Errorf("%q: a duration before now must be positive (e.g. 72h)", s)
		}
		return Position{Ago: d}, nil
	}
	return Position{}, fmt.Errorf("%q is not earliest, latest, an RFC 3339 time (2026-11-24T08:00:00Z) or a duration before now (72h, 3d, 2w)", s)
}

// agoDuration parses a Go duration or a whole number of days ("3d") or
// weeks ("2w").
func agoDuration(s string) (time.Duration, bool) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, true
	}
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseUint(n, 10, 16)
			if err == nil {
				return time.Duration(v) * unit, true
			}
		}
	}
	return 0, false
}
