package worker

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupGaugesDefaultTimings: with the default group timings a worker
// joins, reports bloomgate_group_joined 1, and reports how long it has been
// outside a generation while it is.
func TestGroupGaugesDefaultTimings(t *testing.T) {
	brokers := newCluster(t, 2)
	cfg := testConfig(brokers)
	defaultGroupTimings(&cfg)
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 30*time.Second, "joined gauge", func() bool { return rw.metricSum(t, "bloomgate_group_joined") == 1 })
	if got := rw.metricSum(t, "bloomgate_group_unjoined_seconds"); got != 0 {
		t.Errorf("bloomgate_group_unjoined_seconds = %v while joined, want 0", got)
	}
	if s := rw.w.Status(); !s.Joined || s.UnjoinedSeconds != 0 {
		t.Errorf("status joined=%v unjoined_seconds=%v, want true, 0", s.Joined, s.UnjoinedSeconds)
	}
}

// TestGroupRebuildWhenNoGenerationForms: a coordinator that never answers
// JoinGroup leaves the worker unready, visible in the gauges and status, and
// after groupRebuildAfter the worker joins afresh; once the coordinator
// answers, it joins.
func TestGroupRebuildWhenNoGenerationForms(t *testing.T) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(2, tIn, tOut, tDup, tDLQ), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var swallow atomic.Bool
	swallow.Store(true)
	var joins atomic.Int32
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		joins.Add(1)
		return nil, nil, swallow.Load() // handled without a reply: the join hangs
	})
	cfg := testConfig(c.ListenAddrs())
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.ShutdownTimeout = time.Second, 2*time.Second, time.Second
	rw := startWorker(t, cfg, newMemStore(), nil)
	// rebuild after 2s + max(2s, 6s) + 3s = 11s; kafka-go's own join deadline is 8s.
	waitFor(t, 40*time.Second, "a rebuild", func() bool { return rw.metricSum(t, "bloomgate_group_rebuilds_total") >= 1 })
	if got := rw.metricSum(t, "bloomgate_group_unjoined_seconds"); got < 5 {
		t.Errorf("bloomgate_group_unjoined_seconds = %v after a rebuild, want >= 5", got)
	}
	if s := rw.w.Status(); s.Joined || s.Ready || s.UnjoinedSeconds < 5 {
		t.Errorf("status joined=%v ready=%v unjoined_seconds=%v, want false, false, >= 5", s.Joined, s.Ready, s.UnjoinedSeconds)
	}
	swallow.Store(false)
	waitFor(t, 40*time.Second, "joined after the coordinator answers", func() bool { return rw.w.Status().Joined })
	if joins.Load() < 2 {
		t.Errorf("JoinGroup requests = %d, want >= 2", joins.Load())
	}
}

// TestReadyzNamesUnreachableBrokers: with the default group timings, once
// the brokers stop answering a joined worker, /readyz and the status say
// that joining fails because no broker answers, naming --brokers and the
// error, not only that a rebalance is awaited.
func TestReadyzNamesUnreachableBrokers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(2, tIn, tOut, tDup, tDLQ))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(c.ListenAddrs())
	defaultGroupTimings(&cfg)
	rw := startWorker(t, cfg, newMemStore(), nil)
	waitFor(t, 30*time.Second, "joined", func() bool { return rw.w.Status().Joined })
	addr := c.ListenAddrs()[0]
	c.Close()
	waitFor(t, 60*time.Second, "a join error", func() bool { return rw.w.Status().JoinError != "" })
	s := rw.w.Status()
	if s.Joined || !strings.Contains(s.JoinError, "no answer from the brokers (--brokers "+addr+")") {
		t.Errorf("status joined=%v join_error=%q, want not joined and the brokers named", s.Joined, s.JoinError)
	}
	rec := httptest.NewRecorder()
	rw.w.Handler(prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "joining fails: no answer from the brokers") {
		t.Errorf("/readyz: %d %q", rec.Code, body)
	}
}
