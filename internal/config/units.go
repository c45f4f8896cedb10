package config

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bloomgate/bloomgate/internal/quantity"
)

// The values a user types: durations, counts, rates and byte sizes. Every
// parser takes what a person would write in a flag, an environment
// variable or the YAML file, and its error quotes the value and shows an
// accepted example. Every formatter writes a value so that its parser reads
// it back unchanged (24h, 7d, 10M, 1MiB), for --help defaults and the
// start-up log.

// Examples shown in errors and in --help.
const (
	durationExample = "e.g. 90s, 15m, 36h, 7d or 1d12h"
	countExample    = "e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7"
	rateExample     = "a fraction or a percentage, e.g. 0.01 or 1%"
	byteSizeExample = "e.g. 1048576, 1MiB or 1MB"
)

// valueError is a bad value; its message quotes the value and says what
// would be accepted.
type valueError struct{ msg string }

func (e *valueError) Error() string { return e.msg }

func badValue(format string, args ...any) error {
	return &valueError{msg: fmt.Sprintf(format, args...)}
}

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// durationUnits are the units of ParseDuration, matched without regard to
// case, except that "M" is refused (see ParseDuration).
var durationUnits = map[string]time.Duration{
	"ns": time.Nanosecond,
	"us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"ms": time.Millisecond,
	"s":  time.Second,
	"m":  time.Minute,
	"h":  time.Hour,
	"d":  day,
	"w":  week,
}

// ParseDuration parses a duration as Go's time.ParseDuration does, with two
// more units: d (24h) and w (7d). A value is a sequence of numbers, each
// with a unit and an optional fraction: 90s, 1h30m, 36h, 1.5d, 7d, 2w,
// 1d12h. Units are matched without regard to case (3D, 12H, 500MS), with
// one exception: a lone capital M is refused, because it is read as
// "month" as easily as "minute"; write m for minutes and days for months
// (30d). "0" needs no unit; any other number without a unit is refused
// rather than guessed. A day is always 24 hours: durations here measure
// event time and intervals, not calendar dates.
func ParseDuration(s string) (time.Duration, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, badValue("empty duration: use %s", durationExample)
	}
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	total := new(big.Rat)
	for s != "" {
		s = strings.TrimLeft(s, " ")
		num, rest := scanDecimal(s, false)
		if num == "" {
			return 0, badValue("%q is not a duration: use %s", orig, durationExample)
		}
		unitText, rest := scanUnit(strings.TrimLeft(rest, " "))
		if unitText == "" {
			if rest == "" {
				return 0, badValue("%q has no unit: write e.g. %ss, %sm, %sh or %sd", orig, num, num, num, num)
			}
			return 0, badValue("%q is not a duration: use %s", orig, durationExample)
		}
		if unitText == "M" {
			return 0, badValue("%q: M could mean minutes or months; write m for minutes, or days for months (e.g. 30d)", orig)
		}
		unit, ok := durationUnits[strings.ToLower(unitText)]
		if !ok {
			return 0, badValue("%q: unknown unit %q; use ns, us, ms, s, m, h, d or w, %s", orig, unitText, durationExample)
		}
		r, _ := new(big.Rat).SetString(num) // scanDecimal admits only what SetString reads
		total.Add(total, r.Mul(r, new(big.Rat).SetInt64(int64(unit))))
		s = rest
	}
	ns := new(big.Int).Quo(total.Num(), total.Denom()) // toward zero, as Go drops fractions of a nanosecond
	if neg {
		ns.Neg(ns)
	}
	if !ns.IsInt64() {
		return 0, badValue("%q is too long: at most %s (about 292 years)", orig, FormatDuration(math.MaxInt64/day*day))
	}
	return time.Duration(ns.Int64()), nil
}

// FormatDuration writes d readably, so that ParseDuration reads it back
// (quantity.Duration: 24h, 36h, 7d, 1h30m).
func FormatDuration(d time.Duration) string { return quantity.Duration(d) }

// countSuffixes are the multipliers of ParseCount, lower-cased.
var countSuffixes = map[string]uint64{
	"k": 1e3,
	"m": 1e6,
	"g": 1e9, "b": 1e9,
	"t": 1e12,
}

// ParseCount parses a count: a whole number, written plainly (10000000),
// with underscores between digits (10_000_000), in exponent form (1e7) or
// with a suffix in either case: k (thousand), m (million), g or b
// (billion), t (trillion), also after a fraction (2.5k, 1.5M). The result
// must be whole: 1.5 is refused, 1.5k is 1500.
func ParseCount(s string) (uint64, error) {
	return parseCount(s, math.MaxUint64)
}

func parseCount(s string, limit uint64) (uint64, error) {
	orig := s
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		return 0, badValue("%q is negative: a count is 0 or more, %s", orig, countExample)
	}
	s = strings.TrimPrefix(s, "+")
	digits, ok := stripDigitSeparators(s)
	if !ok {
		return 0, badValue("%q is not a count: underscores go between digits, %s", orig, countExample)
	}
	num, rest := scanDecimal(digits, true)
	if num == "" {
		return 0, badValue("%q is not a count: use %s", orig, countExample)
	}
	mult := uint64(1)
	if rest = strings.TrimSpace(rest); rest != "" {
		m, ok := countSuffixes[strings.ToLower(rest)]
		if !ok {
			return 0, badValue("%q: unknown suffix %q; use k, m, g or b, t (thousand, million, billion, trillion), %s", orig, rest, countExample)
		}
		mult = m
	}
	r, _ := new(big.Rat).SetString(num)
	r.Mul(r, new(big.Rat).SetUint64(mult))
	if !r.IsInt() {
		return 0, badValue("%q is not a whole count: use a whole number, e.g. 2, 1500 or 1.5k", orig)
	}
	n := r.Num()
	if !n.IsUint64() || n.Uint64() > limit {
		return 0, badValue("%q is too large: at most %s", orig, FormatCount(limit))
	}
	return n.Uint64(), nil
}

// FormatCount writes n with the largest suffix that keeps it whole
// (quantity.Count: 10M, 1G, 2500k).
func FormatCount(n uint64) string { return quantity.Count(n) }

// ParseRate parses a rate: a fraction (0.01, 1e-4) or a percentage with an
// optional space before the sign (1%, 0.1 %). The range is checked by the
// caller.
func ParseRate(s string) (float64, error) {
	orig := s
	s = strings.TrimSpace(s)
	pct := false
	if t, ok := strings.CutSuffix(s, "%"); ok {
		pct, s = true, strings.TrimSpace(t)
	}
	sign := ""
	if s != "" && (s[0] == '-' || s[0] == '+') {
		sign, s = s[:1], s[1:]
	}
	num, rest := scanDecimal(s, true)
	if num == "" || rest != "" {
		return 0, badValue("%q is not a rate: use %s", orig, rateExample)
	}
	f, err := strconv.ParseFloat(sign+num, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, badValue("%q is not a rate: use %s", orig, rateExample)
	}
	if pct {
		f /= 100
	}
	return f, nil
}

// FormatRate writes a rate as a fraction (quantity.Rate: 0.01).
func FormatRate(f float64) string { return quantity.Rate(f) }

// byteUnits are the units of ParseByteSize, lower-cased: B, the decimal
// kB, MB, GB, TB and the binary KiB, MiB, GiB, TiB.
var byteUnits = map[string]uint64{
	"b":  1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseByteSize parses a size in bytes: a whole number (1048576), or a
// number with a unit in either case: B, kB, MB, GB, TB (powers of 1000) or
// KiB, MiB, GiB, TiB (powers of 1024); 1MiB = 1048576, 1MB = 1000000. A
// bare k, M, G or T is refused: whether 1M means 1000000 or 1048576 bytes
// is exactly the doubt that makes a record too large for a topic.
func ParseByteSize(s string) (uint64, error) {
	return parseByteSize(s, math.MaxUint64)
}

func parseByteSize(s string, limit uint64) (uint64, error) {
	orig := s
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		return 0, badValue("%q is negative: use %s", orig, byteSizeExample)
	}
	digits, ok := stripDigitSeparators(strings.TrimPrefix(s, "+"))
	if !ok {
		return 0, badValue("%q is not a byte size: use %s", orig, byteSizeExample)
	}
	num, rest := scanDecimal(digits, false)
	if num == "" {
		return 0, badValue("%q is not a byte size: use %s", orig, byteSizeExample)
	}
	mult := uint64(1)
	if rest = strings.TrimSpace(rest); rest != "" {
		m, ok := byteUnits[strings.ToLower(rest)]
		switch {
		case !ok && len(rest) == 1 && strings.ContainsAny(rest, "kKmMgGtT"):
			u := strings.ToUpper(rest)
			if u == "K" {
				u = "k"
			}
			return 0, badValue("%q is ambiguous: write %s%siB (powers of 1024) or %s%sB (powers of 1000)",
				orig, num, strings.ToUpper(rest), num, u)
		case !ok:
			return 0, badValue("%q: unknown unit %q; use B, kB, MB, GB or KiB, MiB, GiB, %s", orig, rest, byteSizeExample)
		}
		mult = m
	}
	r, _ := new(big.Rat).SetString(num)
	r.Mul(r, new(big.Rat).SetUint64(mult))
	if !r.IsInt() {
		return 0, badValue("%q is not a whole number of bytes: use %s", orig, byteSizeExample)
	}
	n := r.Num()
	if !n.IsUint64() || n.Uint64() > limit {
		return 0, badValue("%q is too large: at most %s", orig, FormatByteSize(limit))
	}
	return n.Uint64(), nil
}

// FormatByteSize writes n in the largest unit that keeps it whole
// (quantity.Size: 1MiB, 4KiB, 1MB).
func FormatByteSize(n uint64) string { return quantity.Size(n) }

// formatMemory writes an amount of memory for a message: 2.04 TiB, 22.4
// GiB, 512 MiB, 1 TiB.
func formatMemory(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	switch {
	case i == 0 || b >= 100 || b == math.Trunc(b):
		return fmt.Sprintf("%.0f %s", b, units[i])
	case b >= 10:
		return fmt.Sprintf("%.1f %s", b, units[i])
	}
	return fmt.Sprintf("%.2f %s", b, units[i])
}

// scanDecimal splits s into a leading unsigned decimal number — digits
// with an optional fraction (12, 1.5, .5, 5.), and if exponent is set an
// exponent of at most three digits (1e7, 2.5E-3) — and the rest. num is ""
// if s does not start with one. big.Rat.SetString reads every num.
func scanDecimal(s string, exponent bool) (num, rest string) {
	i, digits := 0, 0
	for i < len(s) && isDigit(s[i]) {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
			digits++
		}
	}
	if digits == 0 {
		return "", s
	}
	if exponent && i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k > j && k-j <= 3 {
			i = k
		}
	}
	return s[:i], s[i:]
}

// scanUnit splits s into the leading run of letters (a unit) and the rest.
func scanUnit(s string) (unit, rest string) {
	for i, r := range s {
		if !unicode.IsLetter(r) {
			return s[:i], s[i:]
		}
	}
	return s, ""
}

// stripDigitSeparators drops the underscores of 10_000_000; ok is false if
// one does not stand between two digits.
func stripDigitSeparators(s string) (string, bool) {
	if !strings.Contains(s, "_") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' {
			if i == 0 || i == len(s)-1 || !isDigit(s[i-1]) || !isDigit(s[i+1]) {
				return "", false
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
