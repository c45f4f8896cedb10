package backoff

import (
	"context"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := New(time.Millisecond, 4*time.Millisecond)
	var got []time.Duration
	for range 4 {
		got = append(got, b.Delay())
		if !b.Wait(context.Background(), 0) {
			t.Fatal("wait returned false without a cancelled context")
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	b.Reset()
	if b.Delay() != time.Millisecond {
		t.Fatalf("after reset the delay is %v, want the first", b.Delay())
	}
	start := time.Now()
	b = New(time.Hour, time.Hour)
	if !b.Wait(context.Background(), time.Millisecond) || time.Since(start) > time.Minute {
		t.Fatal("a limit below the delay was not honoured")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx, 0) {
		t.Fatal("wait returned true with a cancelled context")
	}
}
