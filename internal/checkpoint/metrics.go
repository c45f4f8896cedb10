package checkpoint

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the checkpoint series, labelled by topic and partition.
type metrics struct {
	duration        *prometheus.HistogramVec
	bytes           *prometheus.CounterVec
	failures        *prometheus.CounterVec
	lastSuccess     *prometheus.GaugeVec
	restoreDuration *prometheus.HistogramVec
	fallbacks       *prometheus.CounterVec
	deleted         *prometheus.CounterVec
	fenced          *prometheus.CounterVec
	missing         *prometheus.CounterVec
}

type partitionMetrics struct {
	duration        prometheus.Observer
	bytes           prometheus.Counter
	failures        prometheus.Counter
	lastSuccess     prometheus.Gauge
	restoreDuration prometheus.Observer
	fallbacks       prometheus.Counter
	deleted         prometheus.Counter
	fenced          prometheus.Counter
	missing         prometheus.Counter
}

var labels = []string{"topic", "partition"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	buckets := []float64{.01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120}
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bloomgate_checkpoint_duration_seconds", Help: "Wall time of successful checkpoint commits (uploads and manifest).", Buckets: buckets,
		}, labels),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_bytes_total", Help: "Bytes uploaded for checkpoints (generation objects and manifests, as stored).",
		}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_failures_total", Help: "Checkpoint commits, claims and restores that failed (cancellation and fencing not counted).",
		}, labels),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bloomgate_checkpoint_last_success_timestamp_seconds", Help: "Unix time of the last successful checkpoint commit or claim.",
		}, labels),
		restoreDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bloomgate_checkpoint_restore_duration_seconds", Help: "Wall time of successful restores (reading, verifying and loading).", Buckets: buckets,
		}, labels),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_restore_fallbacks_total", Help: "Manifests skipped by restore because they or their objects were corrupt or missing.",
		}, labels),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_objects_deleted_total", Help: "Manifests and generation objects deleted by retention.",
		}, labels),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_fenced_total", Help: "Commits and claims refused because another writer took the sequence.",
		}, labels),
		missing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_checkpoint_objects_missing_total",
			Help: "Objects named by the last checkpoint that a commit found missing from the store (deleted by something other than retention) and uploaded again.",
		}, labels),
	}
	if reg == nil {
		return m, nil
	}
	// Several stores may share a registry (tests, a process with two
	// locations): reuse what is already registered.
	register := func(c prometheus.Collector) (prometheus.Collector, error) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector, nil
			}
			return nil, fmt.Errorf("registering checkpoint metrics: %w", err)
		}
		return c, nil
	}
	for _, v := range []any{&m.duration, &m.restoreDuration} {
		p := v.(**prometheus.HistogramVec)
		c, err := register(*p)
		if err != nil {
			return nil, err
		}
		*p = c.(*prometheus.HistogramVec)
	}
	for _, v := range []any{&m.bytes, &m.failures, &m.fallbacks, &m.deleted, &m.fenced, &m.missing} {
		p := v.(**prometheus.CounterVec)
		c, err := register(*p)
		if err != nil {
			return nil, err
		}
		*p = c.(*prometheus.CounterVec)
	}
	c, err := register(m.lastSuccess)
	if err != nil {
		return nil, err
	}
	m.lastSuccess = c.(*prometheus.GaugeVec)
	return m, nil
}

// partition creates the partition's series up front, so they start at 0.
func (m *metrics) partition(topic string, partition int) *partitionMetrics {
	l := prometheus.Labels{"topic": topic, "partition": strconv.Itoa(partition)}
	return &partitionMetrics{
		duration:        m.duration.With(l),
		bytes:           m.bytes.With(l),
		failures:        m.failures.With(l),
		lastSuccess:     m.lastSuccess.With(l),
		restoreDuration: m.restoreDuration.With(l),
		fallbacks:       m.fallbacks.With(l),
		deleted:         m.deleted.With(l),
		fenced:          m.fenced.With(l),
		missing:         m.missing.With(l),
	}
}
