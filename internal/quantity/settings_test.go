package quantity

import (
	"testing"
	"time"
)

// TestSettingForms: settings are written as typed (config's tests check
// that every form reads back).
func TestSettingForms(t *testing.T) {
	for got, want := range map[string]string{
		Duration(24 * time.Hour): "24h", Duration(72 * time.Hour): "3d", Duration(90 * time.Minute): "1h30m",
		Duration(0): "0s", Duration(1500 * time.Millisecond): "1.5s",
		Count(10_000_000): "10M", Count(2_500_000): "2500k", Count(2_430_744): "2430744",
		Rate(0.01): "0.01", Size(1 << 20): "1MiB", Size(1_000_000): "1MB", Size(1000588): "1000588",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
