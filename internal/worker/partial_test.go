package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestCorruptLiveBaseRebuilt is the case of issue 20: every kept
// checkpoint names one stored base of the live generation, and 4 bytes of
// it flip. A worker with the default settings (on-restore-failure=fail)
// restores the newest checkpoint in part, rebuilds the live generation
// from the retained input and runs: every key seen before is still a
// duplicate inside the window, nothing is forwarded twice or lost.
func TestCorruptLiveBaseRebuilt(t *testing.T) {
	t.Parallel()
	s := corruptLiveBase(t, 0)
	s.cStatus(t, worker.LostRebuilt)
	if n := s.forwardedTwice; n != 0 {
		t.Errorf("%d repeats of keys seen before the corruption forwarded", n)
	}
	if !strings.Contains(s.logs.String(), "rebuilt from input offsets") {
		t.Errorf("no log line says the generation was rebuilt:\n%s", s.logs.String())
	}
	wantOut, wantDup, _ := expectation(s.all, time.Hour)
	checkKeys(t, "output", readTopic(t, s.brokers, tOut, 1), wantOut)
	checkKeys(t, "duplicates", readTopic(t, s.brokers, tDup, 1), wantDup)
}

// TestCorruptLiveBaseRetentionForgets: as above, but the input's retention
// removed the records where the live generation's keys begin. The worker
// still runs; the keys of the removed records are forgotten (reported at
// error level with their span of event time, counted, on the status page),
// the retained ones are read back, and the sealed generation answers as
// before: exactly the keys seen only in the removed records are forwarded
// again.
func TestCorruptLiveBaseRetentionForgets(t *testing.T) {
	t.Parallel()
	s := corruptLiveBase(t, 1_600)
	lg := s.cStatus(t, worker.LostForgotten)
	if out := s.logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "are forgotten: their repeats are forwarded until event time "+lg.Until.UTC().Format(time.RFC3339)) ||
		!strings.Contains(out, "between "+lg.Start.UTC().Format(time.RFC3339)+" and "+lg.End.UTC().Format(time.RFC3339)) {
		t.Errorf("no error line names the forgotten span:\n%s", out)
	}
	if s.forwardedTwice == 0 || s.forwardedTwice >= s.repeats {
		t.Errorf("%d of %d repeats forwarded again: the forgotten keys should be some, not all", s.forwardedTwice, s.repeats)
	}
	t.Logf("%d of %d repeats of earlier keys forwarded again (their records were removed by retention)", s.forwardedTwice, s.repeats)
	checkKeys(t, "output", readTopic(t, s.brokers, tOut, 1), map[int][]string{0: s.wantOut})
	checkKeys(t, "duplicates", readTopic(t, s.brokers, tDup, 1), map[int][]string{0: s.wantDup})
}

// corruption is a run of corruptLiveBase.
type corruption struct {
	brokers []string
	all     []event // every input event, in order
	w       *runningWorker
	status  worker.Status // C's, once caught up
	logs    *kafkatest.LogBuffer
	// The expectation for the whole input when retention removed records:
	// phase C's repeats of keys seen only in removed records are forwarded.
	wantOut, wantDup []string
	forwardedTwice   int // phase C events forwarded although their key was seen before
	repeats          int // phase C events whose key was seen before
}

// corruptLiveBase runs three workers over one partition:
//
//	A: 2,000 events over 30 minutes of event time: the first 20 minutes
//	   fill a generation that is sealed later, the rest the live one;
//	B: 200 repeats of live keys in four batches, each followed by a
//	   checkpoint: no new key, so every kept manifest names A's base of the
//	   live generation (checked);
//	the base then gets 4 flipped bytes (and, with removeBelow > 0, the
//	input's records below removeBelow are deleted);
//	C: 400 events, half new keys, half repeats of A's, on a new worker with
//	   the default on-restore-failure, run to the end.
func corruptLiveBase(t *testing.T, removeBelow int64) *corruption {
	t.Helper()
	brokers := newCluster(t, 1)
	dir := t.TempDir()
	ex := realExtractor(t)
	s := &corruption{brokers: brokers}

	a := genEvents(2000, 1, 0.2, 61, base)
	for i := range a {
		a[i].TS = base.Add(time.Duration(i) * 900 * time.Millisecond)
	}
	produce(t, brokers, a)
	wA := startWorkerWith(t, realConfig(brokers), realState(t, dir), ex, nil)
	waitFor(t, 60*time.Second, "A consumed", func() bool { return wA.consumed() == 2000 })
	if err := wA.stop(t); err != nil {
		t.Fatal(err)
	}

	var b []event
	wB := startWorkerWith(t, realConfig(brokers), realState(t, dir), ex, nil)
	for batch := range 4 {
		for j := range 50 {
			k := a[1500+(batch*50+j)*2%500].Key
			b = append(b, event{Key: k, Value: "b", TS: base.Add(30*time.Minute + time.Duration(len(b))*time.Millisecond)})
		}
		produce(t, brokers, b[batch*50:])
		waitFor(t, 60*time.Second, "B consumed a batch", func() bool { return wB.consumed() == uint64(len(b)) })
		waitFor(t, 60*time.Second, "B's checkpoint of the batch", func() bool {
			return newestManifest(t, dir).InputOffset == int64(2000+len(b))
		})
	}
	if err := wB.stop(t); err != nil {
		t.Fatal(err)
	}

	m := newestManifest(t, dir)
	live := m.Generations[len(m.Generations)-1]
	if len(m.Generations) < 2 || live.Sealed || !m.Generations[0].Sealed {
		t.Fatalf("want a sealed and a live generation: %+v", m.Generations)
	}
	manifests := filepath.Join(dir, "g", tIn, "0", "manifests")
	ents, err := os.ReadDir(manifests)
	if err != nil || len(ents) < 3 {
		t.Fatalf("%d manifests kept: %v", len(ents), err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(manifests, e.Name()))
		if err != nil || !strings.Contains(string(data), live.Key) {
			t.Fatalf("manifest %s does not name the live base %s (%v): the setup does not share it", e.Name(), live.Key, err)
		}
	}
	path := filepath.Join(dir, "g", tIn, "0", live.Key)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		data[(len(data)/2+i*113)%len(data)] ^= 1 << i
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if removeBelow > 0 {
		if live.KeysFrom == nil || live.KeysFrom.Offset >= removeBelow {
			t.Fatalf("live generation's keys begin at %+v, not below %d", live.KeysFrom, removeBelow)
		}
		deleteRecords(t, brokers, removeBelow)
	}

	c := genEvents(400, 1, 0, 62, base.Add(32*time.Minute))
	for i := range c {
		c[i].Key = []byte(fmt.Sprintf("c-%d", i)) // new
		if i%2 == 1 {
			c[i].Key = a[(i*37)%len(a)].Key // seen in A
		}
	}
	produce(t, brokers, c)
	s.all = append(append(append(s.all, a...), b...), c...)
	s.logs = &kafkatest.LogBuffer{}
	cfg := realConfig(brokers)
	if cfg.OnRestoreFailure != "" && cfg.OnRestoreFailure != worker.RestoreFail {
		t.Fatalf("on-restore-failure %q, want the default", cfg.OnRestoreFailure)
	}
	s.w = startWorkerWith(t, cfg, realState(t, dir), ex, func(w *worker.Worker) {
		w.SetTestLogger(slog.New(slog.NewTextHandler(io.MultiWriter(s.logs, testWriter{t}), nil)))
	})
	caughtUp(t, s.w, map[int]int64{0: int64(len(s.all))})
	s.status = s.w.w.Status() // before stopping: a stopped worker lists no partition
	if err := s.w.stop(t); err != nil {
		t.Fatalf("worker C: %v", err)
	}

	// What C should have done: remembered every key of the sealed
	// generation (records before the rotation at 20 minutes) and of the
	// records still retained; forgotten the rest.
	known := map[string]bool{}
	rotation := int64(0)
	for i, e := range a {
		if e.TS.Before(base.Add(20 * time.Minute)) {
			rotation = int64(i) + 1
		}
	}
	for i, e := range append(append([]event{}, a...), b...) {
		if int64(i) < rotation || int64(i) >= removeBelow {
			known[string(e.Key)] = true
		}
	}
	seenBefore := map[string]bool{}
	for _, e := range append(append([]event{}, a...), b...) {
		seenBefore[string(e.Key)] = true
	}
	out, dup, _ := expectation(append(append([]event{}, a...), b...), time.Hour)
	s.wantOut, s.wantDup = out[0], dup[0]
	for _, e := range c {
		k := string(e.Key)
		if seenBefore[k] && !known[k] {
			s.forwardedTwice++
		}
		if seenBefore[k] {
			s.repeats++
		}
		if known[k] {
			s.wantDup = append(s.wantDup, k)
		} else {
			s.wantOut = append(s.wantOut, k)
		}
		known[k] = true
	}
	return s
}

// cStatus checks the last worker's report of the lost live generation:
// one entry on its status with the outcome, one count in the metric.
func (s *corruption) cStatus(t *testing.T, outcome string) worker.LostGeneration {
	t.Helper()
	st := s.status
	if len(st.Partitions) != 1 {
		t.Fatalf("status: %+v", st.Partitions)
	}
	lost := st.Partitions[0].Lost
	if len(lost) != 1 || lost[0].Outcome != outcome || lost[0].Reason == "" {
		t.Fatalf("lost generations on the status page: %+v, want one %s", lost, outcome)
	}
	if n := metricWith(t, s.w.Registry(), "bloomgate_checkpoint_generations_lost_total", map[string]string{"reason": outcome}); n != 1 {
		t.Errorf("bloomgate_checkpoint_generations_lost_total{reason=%q} = %v, want 1", outcome, n)
	}
	if n := s.w.metricSum(t, "bloomgate_checkpoint_generations_lost_total"); n != 1 {
		t.Errorf("generations lost counted %v times, want once", n)
	}
	return lost[0]
}

// metricWith reads the series of a counter whose labels include labels.
func metricWith(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s %v", name, labels)
	return 0
}

// deleteRecords moves the input partition's log start to offset, as
// retention would.
func deleteRecords(t *testing.T, brokers []string, offset int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: tIn, Partition: 0, At: offset})
	res, err := kadm.NewClient(cl).DeleteRecords(ctx, os)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("deleting records of %s/0 below %d: %v", tIn, offset, err)
	}
	lo, err := kadm.NewClient(cl).ListStartOffsets(ctx, tIn)
	if err != nil || lo.Error() != nil {
		t.Fatalf("listing start offsets: %v %v", err, lo.Error())
	}
	if o, _ := lo.Lookup(tIn, 0); o.Offset != offset {
		t.Fatalf("log start %d after deleting below %d", o.Offset, offset)
	}
}

// testWriter logs to t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
