package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// Position is a parsed --start-from / --seed-from value: earliest, latest,
// an RFC 3339 time, or a duration before now as ParseDuration reads it
// ("72h", "3d", "2w", "1.5d"). It is the worker's type.
type Position = worker.Position

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
	if d, err := ParseDuration(s); err == nil {
		if d <= 0 {
			return Position{}, fmt.Errorf("%q: a duration before now must be positive (e.g. 72h)", s)
		}
		return Position{Ago: d}, nil
	}
	return Position{}, fmt.Errorf("%q is not earliest, latest, an RFC 3339 time (2026-11-24T08:00:00Z) or a duration before now (72h, 3d, 2w, 1d12h)", s)
}
