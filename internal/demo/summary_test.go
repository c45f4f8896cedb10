package demo

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDevSummaryStates: the summary's title and measurements say what is
// known in each way a demo can end.
func TestDevSummaryStates(t *testing.T) {
	orders, _ := scenarioNamed("orders")
	base := devSummary{
		sc: orders, prog: "./bin/bloomgate", plan: planCapacity(800, 8, 4), fpr: 0.01, elapsed: time.Second,
		truth:  devTruth{events: 1000, unique: 800, duplicates: 200, planned: 5000},
		counts: devCounts{consumed: 1000, forwarded: 799, duplicates: 201},
		exact:  true, inputEnd: 1000, cpURL: "file:///cp/run-1",
	}
	tests := []struct {
		name   string
		modify func(*devSummary)
		want   []string
		not    []string
	}{
		{"drained", func(s *devSummary) { s.end, s.complete = endDrained, true },
			[]string{"Summary (every produced event was consumed)", "false positives      1 = unique order_ids - forwarded"}, nil},
		{"interrupted, caught up", func(s *devSummary) { s.end, s.complete = endInterrupted, true },
			[]string{"Summary (interrupted: the producer stopped after 1000 of 5000 events, and the worker consumed every one of them)",
				"false positives      1 = "}, []string{"not measured"}},
		{"interrupted, behind", func(s *devSummary) {
			s.end, s.counts = endInterrupted, devCounts{consumed: 600, forwarded: 500, duplicates: 100}
		}, []string{"the worker stopped before it had consumed them all", "consumed             600 of the 1000 events written (the rest was not processed)",
			"false positives      not measured: the worker stopped before it had consumed every event written"}, nil},
		{"interrupted, last batches unseen", func(s *devSummary) {
			s.end, s.exact, s.counts = endInterrupted, false, devCounts{consumed: 600, forwarded: 500, duplicates: 100}
		}, []string{"consumed             600 of the 1000 events written (or more: the worker's last batches before the stop were not observed)"}, nil},
		{"write cut by the interrupt", func(s *devSummary) { s.end, s.complete, s.inputEnd = endInterrupted, true, 1400 },
			[]string{"+ 400 events of the producer's last write", "not measured: 400 events in orders are not in the ground truth"}, nil},
		{"failed", func(s *devSummary) { s.end, s.cause = endFailed, errors.New("worker: boom") },
			[]string{"Summary (stopped early: worker: boom; counts so far)", "not measured"}, nil},
		{"timeout", func(s *devSummary) { s.end = endTimeout },
			[]string{"Summary (INCOMPLETE: the worker did not consume every produced event)"}, nil},
	}
	for _, tt := range tests {
		s := base
		tt.modify(&s)
		var b strings.Builder
		writeDevSummary(&b, s)
		out := b.String()
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: summary lacks %q:\n%s", tt.name, w, out)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: summary has %q:\n%s", tt.name, w, out)
			}
		}
		// The hints name the program as it was run (make run: ./bin/bloomgate).
		if !strings.Contains(out, "\n  ./bin/bloomgate inspect file:///cp/run-1\n") || strings.Contains(out, "\n  bloomgate ") {
			t.Errorf("%s: hints do not name ./bin/bloomgate:\n%s", tt.name, out)
		}
	}
}

func TestCommandName(t *testing.T) {
	defer func(a string) { os.Args[0] = a }(os.Args[0])
	for arg0, want := range map[string]string{
		"./bin/bloomgate":                       "./bin/bloomgate", // make run
		"bin/bloomgate":                         "bin/bloomgate",
		"bloomgate":                             "bloomgate", // on the PATH
		"/usr/local/bin/bloomgate":              "/usr/local/bin/bloomgate",
		os.TempDir() + "/src/bin/bloomgate":     os.TempDir() + "/src/bin/bloomgate",
		os.TempDir() + "/go-build1/b1/exe/main": "bloomgate", // go run
		"/work/cmd/bloomgate/bloomgate.test":    "bloomgate",
	} {
		os.Args[0] = arg0
		if got := commandName(); got != want {
			t.Errorf("os.Args[0] %q: %q, want %q", arg0, got, want)
		}
	}
}
