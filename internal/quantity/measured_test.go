package quantity

import (
	"math"
	"testing"
	"time"
)

func TestApprox(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0"},
		{1, "1"},
		{999, "999"},
		{1_000, "1.00 k"},
		{1_234, "1.23 k"},
		{9_995, "10.0 k"}, // rounding carries into the next digit
		{99_594, "99.6 k"},
		{99_950, "100 k"},
		{100_000, "100 k"},
		{123_456, "123 k"},
		{999_499, "999 k"},
		{999_500, "1.00 M"}, // and into the next prefix
		{12_345_678, "12.3 M"},
		{5_000_000_000, "5.00 G"},
		{math.MaxUint64, "18.4 E"},
	} {
		if got := Approx(c.n); got != c.want {
			t.Errorf("Approx(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestPerSecond(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0"},
		{3.71e-05, "0"}, // an idle partition's smoothed rate
		{0.0099, "0"},
		{0.01, "0.010"},
		{0.37, "0.370"},
		{5.127, "5.13"},
		{51.27, "51.3"},
		{512.5, "512"}, // half to even
		{999.4, "999"},
		{999.5, "1.00 k"},
		{19_312.7, "19.3 k"},
		{1.93e+04, "19.3 k"},
		{2.5e9, "2.50 G"},
		{1e30, "1000000000000 E"}, // beyond any real rate: no exponent all the same
		{-1, "–"},
		{math.NaN(), "–"},
		{math.Inf(1), "–"},
	} {
		if got := PerSecond(c.f); got != c.want {
			t.Errorf("PerSecond(%g) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0 %"},
		{1.2e-12, "< 0.001 %"},
		{4.9e-06, "< 0.001 %"},
		{5.99e-05, "0.006 %"}, // the estimated FPR of a young filter
		{0.0004, "0.040 %"},
		{0.000706948872596036, "0.071 %"},
		{0.001, "0.100 %"},
		{0.0021, "0.210 %"},
		{0.01, "1.00 %"},
		{0.25, "25.0 %"},
		{0.3800121289954338, "38.0 %"},
		{1, "100 %"},
		{1.7, "170 %"}, // an overfull newest generation
		{9.99, "999 %"},
		{10, "> 999 %"},
		{math.Inf(1), "> 999 %"},
		{-0.1, "–"},
		{math.NaN(), "–"},
	} {
		if got := Percent(c.f); got != c.want {
			t.Errorf("Percent(%g) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{28_032, "27.4 KiB"},
		{1000 << 10, "1000 KiB"}, // four digits rather than 0.977 MiB
		{1023 << 10, "1023 KiB"},
		{1024<<10 - 1, "1.00 MiB"},
		{96 << 20, "96.0 MiB"},
		{672 << 20, "672 MiB"},
		{5 << 30, "5.00 GiB"},
		{3 << 40, "3.00 TiB"},
		{math.MaxUint64, "16.0 EiB"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestElapsed(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0 s"},
		{time.Nanosecond, "< 1 s"},
		{499 * time.Millisecond, "< 1 s"},
		{500 * time.Millisecond, "1 s"},
		{42 * time.Second, "42 s"},
		{59*time.Second + 600*time.Millisecond, "1 m"},
		{60 * time.Second, "1 m"},
		{190 * time.Second, "3 m 10 s"},
		{59*time.Minute + 59*time.Second, "59 m 59 s"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "1 h"},
		{2 * time.Hour, "2 h"},
		{2*time.Hour + 4*time.Minute + 29*time.Second, "2 h 4 m"},
		{2*time.Hour + 4*time.Minute + 30*time.Second, "2 h 5 m"},
		{23*time.Hour + 59*time.Minute + 40*time.Second, "1 d"},
		{76*time.Hour + 20*time.Minute, "3 d 4 h"},
		{math.MaxInt64, "106751 d 23 h"},
		{-time.Second, "–"},
	} {
		if got := Elapsed(c.d); got != c.want {
			t.Errorf("Elapsed(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		s    float64
		want string
	}{
		{0, "0 s"}, // also an unknown ETA; the page does not call seconds for it
		{0.02, "< 1 s"},
		{41.0, "41 s"},
		{70.4, "1 m 10 s"},
		{7200, "2 h"},
		{1e18, "> 100 y"},
		{math.Inf(1), "> 100 y"},
		{-1, "–"},
		{math.NaN(), "–"},
	} {
		if got := Seconds(c.s); got != c.want {
			t.Errorf("Seconds(%g) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "none yet"},
		{now, "0 s ago"},
		{now.Add(time.Second), "just now"}, // another host's clock ahead of ours
		{now.Add(-42 * time.Second), "42 s ago"},
		{now.Add(-90 * time.Second), "1 m 30 s ago"},
		{now.Add(-3*time.Hour - 20*time.Second), "3 h ago"},
		{now.Add(-50 * time.Hour), "2 d 2 h ago"},
	} {
		if got := Age(now, c.t); got != c.want {
			t.Errorf("Age(now, %v) = %q, want %q", c.t, got, c.want)
		}
	}
}
