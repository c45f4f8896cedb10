package quantity

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Settings are written the way a user types them, so that what --help,
// the start-up log, dev, inspect and check show can be pasted back into a
// flag, a variable or the YAML file; internal/config reads these forms
// (ParseDuration, ParseCount, ParseRate, ParseByteSize).

const day = 24 * time.Hour

// Duration writes d readably, so that config.ParseDuration reads it back:
// 24h, 36h, 3d, 7d, 1h30m, 90s as 1m30s, 500ms, 0s. Days are used from 48
// hours on, where counting hours gets tedious; a day or a day and a half
// reads better as 24h and 36h.
func Duration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = -u
	}
	if u >= uint64(2*day) {
		fmt.Fprintf(&b, "%dd", u/uint64(day))
		u %= uint64(day)
	}
	for _, c := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}} {
		if u >= uint64(c.unit) {
			fmt.Fprintf(&b, "%d%s", u/uint64(c.unit), c.name)
			u %= uint64(c.unit)
		}
	}
	if u > 0 {
		b.WriteString(time.Duration(u).String()) // under a minute: 30s, 1.5s, 500ms, 1µs
	}
	return b.String()
}

// Count writes n with the largest suffix that keeps it whole (10M,
// 1G, 2500k); a number no suffix divides is written plainly (2500).
func Count(n uint64) string {
	for _, u := range []struct {
		mult uint64
		name string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

// Rate writes a rate as a fraction (0.01).
func Rate(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Size writes n in the largest binary unit that keeps it whole
// (1MiB, 4KiB), else in the largest decimal one (1MB), else in bytes.
func Size(n uint64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		mult uint64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}, {1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}
