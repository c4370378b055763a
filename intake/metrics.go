package intake

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/ledger"
)

type metrics struct {
	received       *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	claims         prometheus.Counter
	running        prometheus.Gauge
	outcomes       *prometheus.CounterVec
	handlerSeconds *prometheus.HistogramVec
	recordSeconds  prometheus.Histogram
	leaseLosses    prometheus.Counter
	rejected       *prometheus.CounterVec
	settleRetries  *prometheus.CounterVec
	settleGivenUp  *prometheus.CounterVec
	ownSkipped     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, l *ledger.Ledger) (*metrics, error) {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "events_received_total",
			Help: "Events received, by source and notification format."}, []string{"source", "format"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "decisions_total",
			Help: "Ledger decisions on received events, by outcome (new, coalesced, duplicate, stale, ignored)."}, []string{"outcome"}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "claims_total",
			Help: "Claims handed to handlers."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "intake", Name: "handlers_running",
			Help: "Handlers running now."}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "handler_outcomes_total",
			Help: "Handler attempts by outcome (processed, retry, dead, lease_lost, released)."}, []string{"outcome"}),
		handlerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "intake", Name: "handler_duration_seconds",
			Help: "Handler attempt latency by outcome.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)}, []string{"outcome"}),
		recordSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "intake", Name: "record_batch_duration_seconds",
			Help: "Latency of one group-committed ledger write.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)}),
		leaseLosses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "lease_losses_total",
			Help: "Claims whose lease was lost before the handler's outcome was recorded."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "rejected_total",
			Help: "Messages refused, by source and reason: malformed, unknown (format or event type), too_large and invalid_record are content refusals, answered 2xx and kept as dead letters in bucket cairn:refused; unauthorized, origin, host, content_type and method are the webhook's refusals of how a sender is wired (4xx); unavailable: the ledger did not record (503)."}, []string{"source", "reason"}),
		settleRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "settle_retries_total",
			Help: "Ledger writes of a handler's outcome (complete, fail, release) that failed for a transient reason and were retried."}, []string{"op"}),
		settleGivenUp: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "settle_given_up_total",
			Help: "Handler outcomes (complete, fail, release) the ledger could not record before the claim's lease ran out: the work runs again."}, []string{"op"}),
		ownSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "intake", Name: "own_objects_skipped_total",
			Help: "Events for cairn's own objects (probe, locks, journal, object-store ledger) skipped, by prefix."}, []string{"prefix"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.received, m.decisions, m.claims, m.running, m.outcomes, m.handlerSeconds,
		m.recordSeconds, m.leaseLosses, m.rejected, m.settleRetries, m.settleGivenUp, m.ownSkipped, &ledgerCollector{l: l}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ledgerCollector reports the ledger's records by status at scrape time
// (pending depth, dead letters), cached for a second so frequent scrapes do not
// load the database.
type ledgerCollector struct {
	l    *ledger.Ledger
	mu   sync.Mutex
	at   time.Time
	last ledger.Counts
}

var recordsDesc = prometheus.NewDesc("cairn_ledger_records", "Ledger records by status (pending is the work queue's depth; dead are dead letters).", []string{"status"}, nil)

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- recordsDesc }

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		counts, err := c.l.Counts(ctx)
		cancel()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(recordsDesc, err)
			return
		}
		c.last, c.at = counts, time.Now()
	}
	for _, s := range []ledger.Status{ledger.Pending, ledger.Claimed, ledger.Processed, ledger.Failed, ledger.Dead} {
		ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.GaugeValue, float64(c.last[s]), string(s))
	}
}
