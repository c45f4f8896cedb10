package bloom

import (
	"testing"
	"time"
)

func TestPlannedBytesMatchesFullShard(t *testing.T) {
	cfg := Config{Window: 3 * time.Hour, Generations: 4, Capacity: 30_000, FPR: 0.01}
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// One key per span opens every generation of the ring.
	for i := range cfg.Generations {
		s.TestAndAdd(HashKey([]byte{byte(i)}), time.Unix(0, 0).Add(time.Duration(i)*time.Hour))
	}
	if got, want := cfg.PlannedBytes(), s.Stats().Bytes; got != want {
		t.Fatalf("PlannedBytes = %d, a shard with all %d generations open holds %d", got, cfg.Generations, want)
	}
	if (Config{}).PlannedBytes() != 0 {
		t.Fatal("PlannedBytes of an invalid config is not 0")
	}
}
