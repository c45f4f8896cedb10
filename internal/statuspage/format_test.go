package statuspage

import (
	"math"
	"testing"
)

func TestCountOf(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{uint64(0), "0"},
		{uint64(99_594), "99.6 k"},
		{int64(0), "0"},
		{int64(-1), "–"}, // lag not known yet
		{int64(math.MinInt64), "–"},
		{int64(math.MaxInt64), "9.22 E"},
		{int(38_120), "38.1 k"},
		{int32(7), "7"},
		{"7", "–"}, // not an integer
		{nil, "–"},
	} {
		if got := countOf(c.v); got != c.want {
			t.Errorf("countOf(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestBarWidth(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0.0%"},
		{1e-9, "0.0%"},
		{0.619, "61.9%"},
		{1, "100.0%"},
		{1.7, "100.0%"},
		{-0.5, "0.0%"},
		{math.NaN(), "0.0%"},
		{math.Inf(1), "100.0%"},
	} {
		if got := barWidth(c.f); got != c.want {
			t.Errorf("barWidth(%g) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestOffset(t *testing.T) {
	for _, c := range []struct {
		o    int64
		want string
	}{
		{0, "0"},
		{41_018_412, "41018412"}, // all digits: offsets are looked up, not read as sizes
		{math.MaxInt64, "9223372036854775807"},
		{-1, "–"},
		{-2, "–"},
	} {
		if got := offset(c.o); got != c.want {
			t.Errorf("offset(%d) = %q, want %q", c.o, got, c.want)
		}
	}
}
