package statuspage

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The page shows every quantity with at most three significant digits, so
// neighbouring cells read alike whatever their magnitude ("999", "1.00 k",
// "99.6 k", "100 k"), never in exponent notation. Offsets are identifiers,
// not quantities, and keep all their digits. Values that are absent
// (negative where only non-negative ones make sense, NaN) show as "–".
const absent = "–"

// siPrefixes are the decimal prefixes of count and rate.
var siPrefixes = []string{"", " k", " M", " G", " T", " P", " E"}

// binaryPrefixes are the units of byteSize.
var binaryPrefixes = []string{" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"}

// count is a number of things: exact below 1000, else three significant
// digits and a decimal prefix.
func count(n uint64) string {
	if n < 1000 {
		return strconv.FormatUint(n, 10)
	}
	return scaled(float64(n), 1000, siPrefixes)
}

// countOf is count for any integer type the status uses; negative values
// (a lag not yet known) are absent.
func countOf(v any) string {
	var n int64
	switch x := v.(type) {
	case uint64:
		return count(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	default:
		return absent
	}
	if n < 0 {
		return absent
	}
	return count(uint64(n))
}

// rate is a per-second rate with three significant digits; it reads 0
// below 0.01 (one per 100 s), as the smoothed rate of an idle partition
// decays towards 0 without reaching it.
func rate(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f < 0:
		return absent
	case f < 0.01:
		return "0"
	case f < 999.5:
		return sig3(f)
	}
	return scaled(f, 1000, siPrefixes)
}

// percent shows a ratio (0.25) as a percentage ("25.0 %") with three
// significant digits and at most three decimals: an estimated FPR of
// 5.99e-05 reads "0.006 %", smaller positive values "< 0.001 %".
func percent(f float64) string {
	p := 100 * f
	switch {
	case math.IsNaN(p) || p < 0:
		return absent
	case p == 0:
		return "0 %"
	case p < 0.0005:
		return "< 0.001 %"
	case math.IsInf(p, 1) || p >= 999.5:
		return "> 999 %"
	}
	return sig3(p) + " %"
}

// barWidth is the CSS width of a progress or fill bar showing the ratio f,
// clamped to [0, 100 %].
func barWidth(f float64) string {
	if math.IsNaN(f) {
		f = 0
	}
	return strconv.FormatFloat(100*min(max(f, 0), 1), 'f', 1, 64) + "%"
}

// byteSize is a size in binary units: "512 B", "27.4 KiB", "1.50 GiB".
// Between 1000 and 1023 of a unit it keeps four digits ("1023 KiB") rather
// than show 0.999 of the next.
func byteSize(n uint64) string {
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

// offset is a partition offset, all digits; negative offsets (none yet)
// are absent.
func offset(o int64) string {
	if o < 0 {
		return absent
	}
	return strconv.FormatInt(o, 10)
}

// duration reads like "42 s", "3 m 10 s", "2 h", "2 h 5 m", "3 d 4 h":
// seconds below an hour, minutes below a day, hours beyond. Below one
// second it is "< 1 s"; zero is "0 s"; negative durations are absent.
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return absent
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

// seconds is duration for a float number of seconds as /status.json carries
// them (unjoined_seconds, eta_seconds).
func seconds(s float64) string {
	if math.IsNaN(s) || s < 0 {
		return absent
	}
	if s >= math.MaxInt64/float64(time.Second) {
		return "> 100 y"
	}
	return duration(time.Duration(s * float64(time.Second)))
}

// age is how long before now t was: "42 s ago", "none yet" for the zero
// time, "just now" for a time ahead of now (clocks of two hosts).
func age(now, t time.Time) string {
	switch {
	case t.IsZero():
		return "none yet"
	case t.After(now):
		return "just now"
	}
	return duration(now.Sub(t)) + " ago"
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
