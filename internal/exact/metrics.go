package exact

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one store's series. The caller's Registerer carries the
// labels that tell stores apart (topic, partition); refuted filter
// positives are the caller's to count, since only it knows the filter
// said "seen".
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	found, absent prometheus.Counter
	latency       prometheus.Observer
	inserts       prometheus.Counter
	written       prometheus.Counter
	cut           prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, s *Store) (*metrics, error) {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bloomgate_exact_lookups_total",
		Help: "Exact-store lookups (Has, Contains) by result: found, absent.",
	}, []string{"result"})
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "bloomgate_exact_lookup_seconds",
		Help:    "Wall time of exact-store lookups (Has, Contains).",
		Buckets: []float64{2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3, 1e-2},
	})
	inserts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bloomgate_exact_inserts_total",
		Help: "Hashes added to the exact store (including ones already present).",
	})
	written := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bloomgate_exact_written_bytes_total",
		Help: "Bytes of run files written (flushes and merges): the store's write amplification against 16 bytes per insert.",
	})
	cut := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "bloomgate_exact_checkpoint_cut_seconds",
		Help:    "Time a checkpoint held adds and lookups back while it flushed held adds and linked the run files.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	disk := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bloomgate_exact_disk_bytes",
		Help: "Bytes of the exact store's live run files.",
	}, s.diskBytes)
	m := &metrics{
		reg:     reg,
		found:   lookups.WithLabelValues("found"),
		absent:  lookups.WithLabelValues("absent"),
		latency: latency,
		inserts: inserts,
		written: written,
		cut:     cut,
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{lookups, latency, inserts, written, cut, disk} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("registering exact store metrics: another open store has the same labels (wrap the Registerer with the partition's labels): %w", err)
			}
			return nil, fmt.Errorf("registering exact store metrics: %w", err)
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

func (m *metrics) observe(start time.Time, found bool) {
	m.latency.Observe(time.Since(start).Seconds())
	if found {
		m.found.Inc()
	} else {
		m.absent.Inc()
	}
}

// unregister removes the store's series, so that a store of the same
// partition can be opened again (after a rebalance) on the same registry.
func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}
