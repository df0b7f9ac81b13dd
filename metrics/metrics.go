// Package metrics defines the server's Prometheus metrics in one place, on
// a registry the caller owns (never the global one, so that several
// in-process servers in one test binary do not clash). It imports no other
// package of this module: jobs, resolvers and server.go import it and
// record the facts they own; a nil *Metrics records nothing.
package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric name of this server.
const Namespace = "erp"

// Metrics holds the collectors the layers record into.
type Metrics struct {
	// EventsWritten counts journal events committed by mutations and
	// subscribers, by event type.
	EventsWritten *prometheus.CounterVec
	// EventsDispatched counts events whose delivery records were created,
	// by event type.
	EventsDispatched *prometheus.CounterVec
	// EventsFailed counts failed delivery attempts (retried or dead), by
	// event type.
	EventsFailed *prometheus.CounterVec
	// DispatchLatency is created_at → processed_at of processed events, in
	// seconds (both database times).
	DispatchLatency prometheus.Histogram
	// Deliveries counts delivery attempts by subscriber name and outcome
	// (delivered, failed, dead).
	Deliveries *prometheus.CounterVec
	// WebsocketMessages counts websocket messages by result: sent, or
	// dropped (the write failed or the socket was closing).
	WebsocketMessages *prometheus.CounterVec
	// GraphQLRequests counts GraphQL operations by operation type, root
	// field and outcome (ok, error).
	GraphQLRequests *prometheus.CounterVec
	// GraphQLLatency is the time to the first response of an operation,
	// in seconds, by operation type and root field.
	GraphQLLatency *prometheus.HistogramVec

	reg prometheus.Registerer
}

// New creates the metrics and registers them, with the Go runtime and
// process collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		EventsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_written_total",
			Help: "Journal events committed, by event type.",
		}, []string{"type"}),
		EventsDispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_dispatched_total",
			Help: "Events whose delivery records were created, by event type.",
		}, []string{"type"}),
		EventsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "events_failed_total",
			Help: "Failed delivery attempts (to be retried or dead), by event type.",
		}, []string{"type"}),
		DispatchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "event_dispatch_latency_seconds",
			Help:    "Time from an event's commit (created_at) to its processing (processed_at), in seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "deliveries_total",
			Help: "Delivery attempts by subscriber and status (delivered, failed, dead).",
		}, []string{"subscriber", "status"}),
		WebsocketMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "websocket_messages_total",
			Help: "Websocket messages to clients by result (sent, dropped).",
		}, []string{"result"}),
		GraphQLRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "graphql_requests_total",
			Help: "GraphQL operations by operation type, root field and outcome (ok, error).",
		}, []string{"type", "operation", "outcome"}),
		GraphQLLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "graphql_request_duration_seconds",
			Help:    "Time to an operation's first response, in seconds, by operation type and root field.",
			Buckets: prometheus.DefBuckets,
		}, []string{"type", "operation"}),
	}
	reg.MustRegister(m.EventsWritten, m.EventsDispatched, m.EventsFailed, m.DispatchLatency,
		m.Deliveries, m.WebsocketMessages, m.GraphQLRequests, m.GraphQLLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// EventWritten counts one committed event of type typ.
func (m *Metrics) EventWritten(typ string) {
	if m != nil {
		m.EventsWritten.WithLabelValues(typ).Inc()
	}
}

// EventDispatched counts one dispatched event of type typ.
func (m *Metrics) EventDispatched(typ string) {
	if m != nil {
		m.EventsDispatched.WithLabelValues(typ).Inc()
	}
}

// EventProcessedAfter observes the dispatch latency of one processed
// event: processed_at − created_at.
func (m *Metrics) EventProcessedAfter(latency time.Duration) {
	if m != nil {
		m.DispatchLatency.Observe(latency.Seconds())
	}
}

// Delivery counts one delivery attempt of an event of type typ to
// subscriber with status (delivered, failed or dead).
func (m *Metrics) Delivery(typ, subscriber, status string) {
	if m == nil {
		return
	}
	m.Deliveries.WithLabelValues(subscriber, status).Inc()
	if status != "delivered" {
		m.EventsFailed.WithLabelValues(typ).Inc()
	}
}

// WebsocketMessage counts one websocket message: sent, or dropped.
func (m *Metrics) WebsocketMessage(sent bool) {
	if m == nil {
		return
	}
	if sent {
		m.WebsocketMessages.WithLabelValues("sent").Inc()
	} else {
		m.WebsocketMessages.WithLabelValues("dropped").Inc()
	}
}

// GraphQLRequest counts one operation and observes its latency.
func (m *Metrics) GraphQLRequest(opType, operation string, ok bool, took time.Duration) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "error"
	}
	m.GraphQLRequests.WithLabelValues(opType, operation, outcome).Inc()
	m.GraphQLLatency.WithLabelValues(opType, operation).Observe(took.Seconds())
}

// RegisterGauge registers a gauge read at scrape time from fn, e.g. the
// feed's open subscriptions.
func (m *Metrics) RegisterGauge(name, help string, fn func() float64) {
	if m != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, fn))
	}
}

// ScrapeCache is how long the figures read from the database for a scrape
// are kept: the scrapes within it, concurrent ones included, answer from
// the last read. However often /metrics is asked, and by whom, each
// database statement behind it runs at most once per ScrapeCache.
const ScrapeCache = 5 * time.Second

// scrapeTimeout bounds a database read of a scrape against a database that
// hangs.
const scrapeTimeout = 2 * time.Second

// cached keeps the last result of read, error included, for ScrapeCache.
type cached[T any] struct {
	read func(context.Context) (T, error)

	// mu is held through a read, so that concurrent scrapes wait for one
	// read instead of each running its own.
	mu  sync.Mutex
	at  time.Time // of the last read; zero before the first
	val T
	err error
}

func (c *cached[T]) get() (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= ScrapeCache {
		// Collect has no context of its own.
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		c.val, c.err = c.read(ctx)
		cancel()
		c.at = time.Now()
	}
	return c.val, c.err
}

// RegisterDatabase registers the collectors of the database: pgxpool's
// statistics of each of pools, labelled pool with its name, read from
// memory at every scrape, and River's jobs by state from jobs, read at
// most once per ScrapeCache (given 2 s).
func (m *Metrics) RegisterDatabase(pools map[string]*pgxpool.Pool, jobs func(context.Context) ([]JobCount, error)) {
	if m != nil {
		m.reg.MustRegister(poolCollector{pools: pools}, queueCollector{counts: &cached[[]JobCount]{read: jobs}})
	}
}

var (
	poolConns = prometheus.NewDesc(Namespace+"_db_pool_connections", "Connections of the pool by state (acquired, idle, constructing).", []string{"pool", "state"}, nil)
	poolMax   = prometheus.NewDesc(Namespace+"_db_pool_max_connections", "The pool's maximum size.", []string{"pool"}, nil)
	poolWaits = prometheus.NewDesc(Namespace+"_db_pool_acquire_waits_total", "Acquires that had to wait for a connection.", []string{"pool"}, nil)
	poolWait  = prometheus.NewDesc(Namespace+"_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection, in seconds.", []string{"pool"}, nil)
	poolAcq   = prometheus.NewDesc(Namespace+"_db_pool_acquires_total", "Successful acquires from the pool.", []string{"pool"}, nil)
)

// poolCollector reports pgxpool.Stat of each pool, by name, at scrape
// time.
type poolCollector struct{ pools map[string]*pgxpool.Pool }

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolMax
	ch <- poolWaits
	ch <- poolWait
	ch <- poolAcq
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for name, pool := range c.pools {
		s := pool.Stat()
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.AcquiredConns()), name, "acquired")
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.IdleConns()), name, "idle")
		ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(s.ConstructingConns()), name, "constructing")
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()), name)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()), name)
		ch <- prometheus.MustNewConstMetric(poolWait, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), name)
		ch <- prometheus.MustNewConstMetric(poolAcq, prometheus.CounterValue, float64(s.AcquireCount()), name)
	}
}

var queueDepth = prometheus.NewDesc(Namespace+"_river_jobs",
	"River jobs by state: exact below 1,000, else PostgreSQL's estimate as of the last ANALYZE of river_job (at least 1,000); read at most every 5 s.",
	[]string{"state"}, nil)

// JobCount is the number of River jobs in one state, as the scrape reports
// it.
type JobCount struct {
	// State is River's job state, the metric's label.
	State string
	// Jobs is the count (see erp_river_jobs' help).
	Jobs int64
}

// queueCollector reports River's jobs by state, from the cached read.
type queueCollector struct{ counts *cached[[]JobCount] }

func (queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDepth }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.counts.get()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queueDepth, fmt.Errorf("count river jobs: %w", err))
		return
	}
	for _, n := range counts {
		ch <- prometheus.MustNewConstMetric(queueDepth, prometheus.GaugeValue, float64(n.Jobs), n.State)
	}
}

// SubscriberLag is one subscriber's lag as the scrape reports it.
type SubscriberLag struct {
	// Subscriber is the name, the metrics' label.
	Subscriber string
	// Pending counts its delivery records not yet delivered nor dead.
	Pending int64
	// OldestPendingSeconds is the age of the oldest of them, in seconds;
	// 0 with none.
	OldestPendingSeconds float64
}

var (
	subscriberPending = prometheus.NewDesc(Namespace+"_subscriber_pending",
		"Delivery records of a subscriber not yet delivered nor dead (pending or failed), counted up to 10,000 (10,000: at least as many); read at most every 5 s.", []string{"subscriber"}, nil)
	subscriberOldest = prometheus.NewDesc(Namespace+"_subscriber_oldest_pending_seconds",
		"Age of a subscriber's oldest delivery record not yet delivered nor dead, in seconds (0 with none), read at most every 5 s.", []string{"subscriber"}, nil)
)

// RegisterSubscriberLag registers the per-subscriber lag gauges
// erp_subscriber_pending and erp_subscriber_oldest_pending_seconds, read
// from lags at most once per ScrapeCache (given 2 s).
func (m *Metrics) RegisterSubscriberLag(lags func(context.Context) ([]SubscriberLag, error)) {
	if m != nil {
		m.reg.MustRegister(lagCollector{lags: &cached[[]SubscriberLag]{read: lags}})
	}
}

type lagCollector struct{ lags *cached[[]SubscriberLag] }

func (lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- subscriberPending
	ch <- subscriberOldest
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	lags, err := c.lags.get()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(subscriberPending, fmt.Errorf("read subscriber lag: %w", err))
		return
	}
	for _, l := range lags {
		ch <- prometheus.MustNewConstMetric(subscriberPending, prometheus.GaugeValue, float64(l.Pending), l.Subscriber)
		ch <- prometheus.MustNewConstMetric(subscriberOldest, prometheus.GaugeValue, l.OldestPendingSeconds, l.Subscriber)
	}
}
