package quantity

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Measurements are shown with at most three significant digits, so that
// neighbouring values read alike whatever their magnitude ("999", "1.00 k",
// "99.6 k", "100 k"), never in exponent notation. Values that are absent
// (negative where only non-negative ones make sense, NaN) show as Absent.
const Absent = "–"

// siPrefixes are the decimal prefixes of Approx and PerSecond.
var siPrefixes = []string{"", " k", " M", " G", " T", " P", " E"}

// binaryPrefixes are the units of Bytes.
var binaryPrefixes = []string{" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"}

// Approx is a number of things: exact below 1000, else three significant
// digits and a decimal prefix.
func Approx(n uint64) string {
	if n < 1000 {
		return strconv.FormatUint(n, 10)
	}
	return scaled(float64(n), 1000, siPrefixes)
}

// PerSecond is a per-second rate with three significant digits; it reads 0
// below 0.01 (one per 100 s), as the smoothed rate of an idle partition
// decays towards 0 without reaching it.
func PerSecond(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f < 0:
		return Absent
	case f < 0.01:
		return "0"
	case f < 999.5:
		return sig3(f)
	}
	return scaled(f, 1000, siPrefixes)
}

// Percent shows a ratio (0.25) as a percentage ("25.0 %") with three
// significant digits and at most three decimals: an estimated FPR of
// 5.99e-05 reads "0.006 %", smaller positive values "< 0.001 %".
func Percent(f float64) string {
	p := 100 * f
	switch {
	case math.IsNaN(p) || p < 0:
		return Absent
	case p == 0:
		return "0 %"
	case p < 0.0005:
		return "< 0.001 %"
	case math.IsInf(p, 1) || p >= 999.5:
		return "> 999 %"
	}
	return sig3(p) + " %"
}

// Bytes is a size in binary units: "512 B", "27.4 KiB", "1.50 GiB".
// Between 1000 and 1023 of a unit it keeps four digits ("1023 KiB") rather
// than show 0.999 of the next.
func Bytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	f, i := float64(n), 0
	for f >= 1024 && i < len(binaryPrefixes)-1 {
		f /= 1024
		i++
	}
	if f >= 999.5 && f < 1023.5 {
		return strconv.FormatFloat(f, 'f', 0, 64) + binaryPrefixes[i]
	}
	if f >= 1023.5 && i < len(binaryPrefixes)-1 {
		f, i = f/1024, i+1
	}
	return sig3(f) + binaryPrefixes[i]
}

// Elapsed reads like "42 s", "3 m 10 s", "2 h", "2 h 5 m", "3 d 4 h":
// seconds below an hour, minutes below a day, hours beyond. Below one
// second it is "< 1 s"; zero is "0 s"; negative durations are Absent.
func Elapsed(d time.Duration) string {
	switch {
	case d < 0:
		return Absent
	case d == 0:
		return "0 s"
	case d < 500*time.Millisecond:
		return "< 1 s"
	}
	// Round to the smallest unit shown; rounding may carry into a larger
	// unit (59 m 59.6 s is 1 h) and then shows less.
	least := time.Second
	r := d.Round(least)
	if r >= time.Hour {
		least, r = time.Minute, d.Round(time.Minute)
	}
	if r >= 24*time.Hour {
		least, r = time.Hour, d.Round(time.Hour)
	}
	parts := make([]string, 0, 2)
	for _, u := range []struct {
		size time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if u.size < least {
			break
		}
		if r >= u.size {
			parts = append(parts, strconv.FormatInt(int64(r/u.size), 10)+" "+u.name)
			r %= u.size
		}
	}
	return strings.Join(parts, " ")
}

// Seconds is Elapsed for a float number of seconds as /status.json carries
// them (unjoined_seconds, eta_seconds).
func Seconds(s float64) string {
	if math.IsNaN(s) || s < 0 {
		return Absent
	}
	if s >= math.MaxInt64/float64(time.Second) {
		return "> 100 y"
	}
	return Elapsed(time.Duration(s * float64(time.Second)))
}

// Age is how long before now t was: "42 s ago", "none yet" for the zero
// time, "just now" for a time ahead of now (clocks of two hosts).
func Age(now, t time.Time) string {
	switch {
	case t.IsZero():
		return "none yet"
	case t.After(now):
		return "just now"
	}
	return Elapsed(now.Sub(t)) + " ago"
}

// scaled divides f by base until it is below 1000 and shows it with three
// significant digits and the matching prefix. Rounding may carry into the
// next prefix (999 950 is "1.00 M", not "1000 k").
func scaled(f, base float64, prefixes []string) string {
	i := 0
	for f >= 999.5 && i < len(prefixes)-1 {
		f /= base
		i++
	}
	return sig3(f) + prefixes[i]
}

// sig3 formats f (0 <= f < 999.5) with three significant digits but at
// most three decimals, and no exponent: 0.006, 0.370, 1.23, 12.3, 123.
func sig3(f float64) string {
	decimals := 0
	switch {
	case f < 0.9995:
		decimals = 3
	case f < 9.995:
		decimals = 2
	case f < 99.95:
		decimals = 1
	}
	return strconv.FormatFloat(f, 'f', decimals, 64)
}
