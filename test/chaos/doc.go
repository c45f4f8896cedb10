// Package chaos holds the crash-safety test of bloomgate: a broker process,
// three worker processes in one group and a real S3 server for checkpoints,
// while workers are killed with SIGKILL (at random, during checkpoint
// uploads, during rebalances, two of three at once, in bursts, right after a
// leader election; all with the default group timings) and the broker is
// killed and restarted once; TestChaosZombie stops a worker past its session
// timeout instead.
// At the end every input offset must be accounted for exactly once across
// the output, duplicates and dead-letter topics, and every unique key must be
// on the output exactly once, except false positives of the filter, which
// must be on the duplicates topic and within the configured rate.
//
// The package has no code; the test is in chaos_test.go. See docs/chaos.md.
package chaos
