package config

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// workerConfig loads minimal plus args and maps them for the worker.
func workerConfig(t *testing.T, args ...string) (*Run, worker.Config) {
	t.Helper()
	cfg, err := Load(append(append([]string{}, minimal...), args...), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Load(%v): %v", args, err)
	}
	wc, err := cfg.WorkerConfig()
	if err != nil {
		t.Fatalf("WorkerConfig: %v", err)
	}
	return cfg, wc
}

// TestDefaultsAgree: the defaults of `bloomgate run`, mapped for the
// worker, are valid there and are what the worker would choose for itself:
// a worker given nothing runs as `bloomgate run` given nothing.
func TestDefaultsAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"with a dead-letter topic", []string{"--dead-letter", "dlq"}},
		{"with a longer checkpoint interval", []string{"--checkpoint-interval", "2m", "--max-checkpoint-staleness", "20m"}},
		{"with a longer session timeout", []string{"--session-timeout", "30s"}},
		{"repartitioned", []string{"--repartition"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, mapped := workerConfig(t, tc.args...)
			if err := mapped.Validate(); err != nil {
				t.Fatalf("worker refuses the mapped settings: %v", err)
			}
			// The worker's own choices for what the settings did not set.
			own := worker.Config{Brokers: mapped.Brokers, Input: mapped.Input, Output: mapped.Output, DeadLetter: mapped.DeadLetter, Filter: mapped.Filter}
			for _, a := range tc.args {
				switch a {
				case "--checkpoint-interval":
					own.CheckpointInterval = mapped.CheckpointInterval
				case "--session-timeout":
					own.SessionTimeout = mapped.SessionTimeout
				}
			}
			got, want := mapped.WithDefaults(), own.WithDefaults()
			for _, f := range []struct {
				name      string
				got, want any
			}{
				{"group", got.Group, want.Group},
				{"on-missing-key", got.OnMissingKey, want.OnMissingKey},
				{"on-unwritable", got.OnUnwritable, want.OnUnwritable},
				{"partitioning", got.Partitioning, want.Partitioning},
				{"isolation-level", got.IsolationLevel, want.IsolationLevel},
				{"start-from", got.StartFrom, want.StartFrom},
				{"seed-from", got.SeedFrom, want.SeedFrom},
				{"checkpoint-interval", got.CheckpointInterval, want.CheckpointInterval},
				{"max-checkpoint-staleness", got.MaxCheckpointStaleness, want.MaxCheckpointStaleness},
				{"checkpoint timeout", got.CheckpointTimeout, want.CheckpointTimeout},
				{"on-restore-failure", got.OnRestoreFailure, want.OnRestoreFailure},
				{"max-replay", got.MaxReplay, want.MaxReplay},
				{"batch-size", got.BatchSize, want.BatchSize},
				{"max-batch-bytes", got.MaxBatchBytes, want.MaxBatchBytes},
				{"batch-timeout", got.BatchTimeout, want.BatchTimeout},
				{"commit-interval", got.CommitInterval, want.CommitInterval},
				{"write-timeout", got.WriteTimeout, want.WriteTimeout},
				{"shutdown-timeout", got.ShutdownTimeout, want.ShutdownTimeout},
				{"session-timeout", got.SessionTimeout, want.SessionTimeout},
				{"heartbeat-interval", got.HeartbeatInterval, want.HeartbeatInterval},
				{"rebalance-timeout", got.RebalanceTimeout, want.RebalanceTimeout},
				{"join-group-backoff", got.JoinGroupBackoff, want.JoinGroupBackoff},
				{"dial timeout", got.Dialer.Timeout, want.Dialer.Timeout},
				{"transport dial timeout", got.Transport.DialTimeout, want.Transport.DialTimeout},
				{"owner", got.Owner, want.Owner},
			} {
				if !reflect.DeepEqual(f.got, f.want) {
					t.Errorf("%s: bloomgate run uses %v, the worker's default is %v", f.name, f.got, f.want)
				}
			}
		})
	}
}

// TestProductDefaults pins the defaults docs/settings.md's table and --help
// show, now that they come from the worker.
func TestProductDefaults(t *testing.T) {
	cfg, wc := workerConfig(t)
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"batch-size", cfg.BatchSize, 2000},
		{"checkpoint-interval", cfg.CheckpointInterval, time.Minute},
		{"max-checkpoint-staleness", cfg.MaxCheckpointStaleness, 10 * time.Minute},
		{"session-timeout", cfg.SessionTimeout, 10 * time.Second},
		{"heartbeat-interval", cfg.HeartbeatInterval, time.Second},
		{"join-group-backoff", cfg.JoinGroupBackoff, time.Second},
		{"shutdown-timeout", cfg.ShutdownTimeout, 30 * time.Second},
		{"mapped batch size", wc.BatchSize, 2000},
		{"mapped staleness", wc.MaxCheckpointStaleness, 10 * time.Minute},
		{"mapped input", wc.Input, "in"},
	} {
		if f.got != f.want {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
}

// TestWorkerAcceptsWhatConfigAccepts: every setting config.Validate
// accepts, at the edges of its range, the worker accepts too. Settings
// both check with the same function on the same values are left out: the
// filter's (filterplan.Params.Check), --batch-size and --max-batch-bytes
// (worker.CheckBatchSize, CheckMaxBatchBytes). The timings are checked
// with the same functions too (worker/timings.go), but the worker checks
// them with its defaults filled in, so their edges stay here.
func TestWorkerAcceptsWhatConfigAccepts(t *testing.T) {
	for _, args := range [][]string{
		{"--batch-timeout", "1ns"},
		{"--max-checkpoint-staleness", "0s"},
		{"--max-checkpoint-staleness", "1m", "--checkpoint-interval", "1m"},
		{"--checkpoint-interval", "1ns", "--max-checkpoint-staleness", "1ns"},
		{"--session-timeout", "2ns", "--heartbeat-interval", "1ns", "--rebalance-timeout", "3ns"},
		{"--session-timeout", "1h", "--rebalance-timeout", "0s"},
		{"--max-replay", "0"},
		{"--max-replay", "1e18"},
		{"--on-missing-key", "fail"},
		{"--dead-letter", "dlq", "--on-missing-key", "dead-letter"},
		{"--dead-letter", "dlq", "--on-unwritable", "dead-letter"},
		{"--on-unwritable", "stall"},
		{"--dead-letter", "dlq", "--on-unwritable", "drop"},
		{"--partitioning", "hash", "--isolation-level", "read_uncommitted", "--on-restore-failure", "empty"},
		{"--start-from", "latest", "--seed-from", "72h"},
		{"--start-from", "2026-11-24T08:00:00Z"},
	} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			_, wc := workerConfig(t, args...)
			if err := wc.Validate(); err != nil {
				t.Errorf("config accepts %v, the worker refuses: %v", args, err)
			}
		})
	}
}

// TestValidateChangesNothing: Validate only reads; Resolve is the step that
// fills the derived on-missing-key and on-unwritable, and Validate accepts
// the Run before and after it.
func TestValidateChangesNothing(t *testing.T) {
	for _, args := range [][]string{nil, {"--dead-letter", "dlq"}, {"--fpr", "2", "--window", "0s"}} {
		cfg, err := Parse(append(append([]string{}, minimal...), args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		orig := *cfg
		first, second := cfg.Validate(), cfg.Validate()
		if !reflect.DeepEqual(*cfg, orig) {
			t.Errorf("%v: Validate changed the settings:\n got %+v\nwant %+v", args, *cfg, orig)
		}
		if fmt.Sprint(first) != fmt.Sprint(second) {
			t.Errorf("%v: Validate twice: %v, then %v", args, first, second)
		}
		if cfg.OnMissingKey != "" || cfg.OnUnwritable != "" {
			t.Errorf("%v: on-missing-key %q, on-unwritable %q before Resolve", args, cfg.OnMissingKey, cfg.OnUnwritable)
		}
		cfg.Resolve()
		want, wantUnwritable := OnMissingForward, OnUnwritableStall
		if cfg.DeadLetter != "" {
			want, wantUnwritable = OnMissingDeadLetter, OnUnwritableDeadLetter
		}
		if cfg.OnMissingKey != want || cfg.OnUnwritable != wantUnwritable {
			t.Errorf("%v: resolved on-missing-key %q, on-unwritable %q; want %q, %q", args, cfg.OnMissingKey, cfg.OnUnwritable, want, wantUnwritable)
		}
		if again := cfg.Validate(); fmt.Sprint(again) != fmt.Sprint(first) {
			t.Errorf("%v: Validate after Resolve: %v, before: %v", args, again, first)
		}
	}
}

// TestStalenessNoBound: --max-checkpoint-staleness 0s, from a flag or the
// environment, is the worker's NoBound, passed on unchanged and shown as 0s
// again; the worker keeps it (no default replaces it).
// internal/worker's TestStalenessNoBound runs a worker with it.
func TestStalenessNoBound(t *testing.T) {
	cfg, wc := workerConfig(t, "--max-checkpoint-staleness", "0s")
	if cfg.MaxCheckpointStaleness != worker.NoBound || wc.MaxCheckpointStaleness != worker.NoBound ||
		wc.WithDefaults().MaxCheckpointStaleness != worker.NoBound {
		t.Fatalf("0s: setting %v, mapped %v, effective %v; want NoBound throughout",
			cfg.MaxCheckpointStaleness, wc.MaxCheckpointStaleness, wc.WithDefaults().MaxCheckpointStaleness)
	}
	if got := cfg.FlagSet("show").Lookup("max-checkpoint-staleness").Value.String(); got != "0s" {
		t.Errorf("shown as %q, want 0s", got)
	}
	t.Setenv("BLOOMGATE_MAX_CHECKPOINT_STALENESS", "0")
	if cfg, _ := workerConfig(t); cfg.MaxCheckpointStaleness != worker.NoBound {
		t.Errorf("0 from the environment: %v, want NoBound", cfg.MaxCheckpointStaleness)
	}
	if _, err := Load(append(append([]string{}, minimal...), "--max-checkpoint-staleness", "-1ns"), &bytes.Buffer{}); err == nil {
		t.Error("a negative staleness was accepted")
	}
}

// TestPasswordSourceNamed: the messages about refused logins name the
// variable the password is read from.
func TestPasswordSourceNamed(t *testing.T) {
	want := LookupEnvName("sasl-password") + " (or --sasl-password)"
	if brokercheck.PasswordSource != want {
		t.Errorf("brokercheck.PasswordSource = %q, want %q", brokercheck.PasswordSource, want)
	}
}

// TestInstanceIDAutoOnlyInKubernetes: auto takes a pod name only where it
// is certain: POD_NAME, or HOSTNAME inside Kubernetes. A host named like
// a pod elsewhere (three containers called dedup-1) stays dynamic, so that
// its workers do not fence each other.
func TestInstanceIDAutoOnlyInKubernetes(t *testing.T) {
	for _, tc := range []struct {
		pod, host, k8s, want string
	}{
		{"dedup-1", "", "", "dedup-1"},
		{"", "dedup-1", "10.0.0.1", "dedup-1"},
		{"", "dedup-1", "", ""},
		{"", "dedup-7f9c6d", "10.0.0.1", ""}, // a Deployment's pod: not stable
		{"dedup-2", "dedup-1", "10.0.0.1", "dedup-2"},
	} {
		t.Setenv("POD_NAME", tc.pod)
		t.Setenv("HOSTNAME", tc.host)
		t.Setenv("KUBERNETES_SERVICE_HOST", tc.k8s)
		c := Default()
		c.GroupInstanceID = "auto"
		if got := c.InstanceID(); got != tc.want {
			t.Errorf("POD_NAME=%q HOSTNAME=%q KUBERNETES_SERVICE_HOST=%q: %q, want %q", tc.pod, tc.host, tc.k8s, got, tc.want)
		}
	}
}
