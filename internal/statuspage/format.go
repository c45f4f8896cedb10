package statuspage

import (
	"math"
	"strconv"

	"github.com/bloomgate/bloomgate/internal/quantity"
)

// The page's values are written by internal/quantity, as everywhere else:
// every quantity with at most three significant digits. Offsets are
// identifiers, not quantities, and keep all their digits.
const absent = quantity.Absent

var (
	count    = quantity.Approx
	rate     = quantity.PerSecond
	percent  = quantity.Percent
	byteSize = quantity.Bytes
	duration = quantity.Elapsed
	seconds  = quantity.Seconds
	age      = quantity.Age
)

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

// barWidth is the CSS width of a progress or fill bar showing the ratio f,
// clamped to [0, 100 %].
func barWidth(f float64) string {
	if math.IsNaN(f) {
		f = 0
	}
	return strconv.FormatFloat(100*min(max(f, 0), 1), 'f', 1, 64) + "%"
}

// offset is a partition offset, all digits; negative offsets (none yet)
// are absent.
func offset(o int64) string {
	if o < 0 {
		return absent
	}
	return strconv.FormatInt(o, 10)
}
