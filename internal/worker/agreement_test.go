package worker

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
)

// TestMembersDisagreeOnSettings: a second worker joins the group with
// another --window (before: it took half the partitions and forwarded
// repeats the other catches, with one INFO line). It gets no partitions,
// both members report the disagreement naming both values (log, gauge,
// status), and every event is judged by the members that agree. When the
// first worker leaves, the second one's settings are the group's and it
// takes every partition: a rolling change of settings completes.
func TestMembersDisagreeOnSettings(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t, 4)
	evs := genEvents(2000, 4, 0.2, 97, base)
	produce(t, brokers, evs[:1000])
	store := newMemStore()
	cfgA := testConfig(brokers)
	defaultGroupTimings(&cfgA)
	cfgA.Owner = "a"
	a := startWorker(t, cfgA, store, nil)
	waitFor(t, 60*time.Second, "a consumed the first half", func() bool { return a.consumed() == 1000 })

	cfgB := cfgA
	cfgB.Owner, cfgB.Filter.Window = "b", 2*time.Hour
	var logs kafkatest.LogBuffer
	b := startWorker(t, cfgB, store, func(w *Worker) {
		w.log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil)).With("owner", "b")
	})
	waitFor(t, 60*time.Second, "both members see the disagreement", func() bool {
		return len(b.w.Status().SettingsConflicts) == 1 && len(a.w.Status().SettingsConflicts) == 1 &&
			a.metricSum(t, "bloomgate_group_settings_conflicts") == 1 && b.metricSum(t, "bloomgate_group_settings_conflicts") == 1
	})
	produce(t, brokers, evs[1000:])
	waitFor(t, 60*time.Second, "a consumed everything", func() bool {
		s := a.w.Status()
		var next int64
		for _, p := range s.Partitions {
			next += p.NextOffset
		}
		return len(s.Assigned) == 4 && len(s.Partitions) == 4 && next == 2000
	})
	if s := b.w.Status(); len(s.Assigned) != 0 || b.metricSum(t, "bloomgate_records_consumed_total") != 0 {
		t.Errorf("the disagreeing member was assigned %v and consumed %v records", s.Assigned, b.metricSum(t, "bloomgate_records_consumed_total"))
	}
	if d := strings.Join(b.w.Status().SettingsConflicts[0].Diffs, "; "); d != "--window 2h0m0s here, 1h0m0s there" {
		t.Errorf("b reports %q", d)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "--window 2h0m0s here, 1h0m0s there") {
		t.Errorf("b's log does not name the disagreement at ERROR:\n%s", logs.String())
	}

	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	waitFor(t, 60*time.Second, "b, alone, takes every partition", func() bool {
		s := b.w.Status()
		return len(s.Assigned) == 4 && len(s.SettingsConflicts) == 0 && b.metricSum(t, "bloomgate_group_settings_conflicts") == 0
	})
	b.stop(t)
	wantOut, wantDup, _ := expectation(evs, time.Hour)
	checkKeys(t, "output", readTopic(t, brokers, tOut, 4), wantOut)
	checkKeys(t, "duplicates", readTopic(t, brokers, tDup, 4), wantDup)
}

// TestSettingsDifferences: settings both members name are compared;
// settings only one names (another build) are not a disagreement, nor is
// a member that announces nothing.
func TestSettingsDifferences(t *testing.T) {
	mine := []Setting{{"fpr", "0.01"}, {"key", "json:order_id"}, {"window", "24h0m0s"}}
	theirs, ok := decodeSettings(encodeSettings([]Setting{{"fpr", "0.01"}, {"key", "json:id"}, {"new-setting", "x"}, {"window", "24h0m0s"}}))
	if !ok {
		t.Fatal("round trip failed")
	}
	if d := differences(mine, theirs); len(d) != 1 || d[0] != "--key json:order_id here, json:id there" {
		t.Errorf("differences %q", d)
	}
	if _, ok := decodeSettings(nil); ok {
		t.Error("empty user data decoded as settings")
	}
	if _, ok := decodeSettings([]byte("not json")); ok {
		t.Error("garbage decoded as settings")
	}
}
