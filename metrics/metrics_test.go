package metrics_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"erp/metrics"
)

// Scrapes read the database at most once per ScrapeCache, however many
// there are and however close together: concurrent scrapes wait for one
// read, later ones answer from it until it is ScrapeCache old. A failed
// read is kept as long, so that a struggling database is not asked again
// by every scrape.
func TestScrapesShareOneDatabaseRead(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		var jobReads, lagReads atomic.Int64
		var failing atomic.Bool
		m.RegisterDatabase(nil, func(context.Context) ([]metrics.JobCount, error) {
			n := jobReads.Add(1)
			if failing.Load() {
				return nil, errors.New("database down")
			}
			return []metrics.JobCount{{State: "available", Jobs: n}}, nil
		})
		m.RegisterSubscriberLag(func(context.Context) ([]metrics.SubscriberLag, error) {
			lagReads.Add(1)
			return []metrics.SubscriberLag{{Subscriber: "mes", Pending: 3}}, nil
		})

		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, err := reg.Gather()
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		require.Equal(t, int64(1), jobReads.Load(), "20 concurrent scrapes, one read")
		require.Equal(t, int64(1), lagReads.Load())

		time.Sleep(metrics.ScrapeCache - time.Millisecond)
		require.Equal(t, 1.0, gauge(t, reg, "erp_river_jobs"), "within ScrapeCache: the first read")
		require.Equal(t, int64(1), jobReads.Load())

		time.Sleep(time.Millisecond)
		require.Equal(t, 2.0, gauge(t, reg, "erp_river_jobs"), "ScrapeCache later: read again")
		require.Equal(t, int64(2), jobReads.Load())
		require.Equal(t, int64(2), lagReads.Load())

		failing.Store(true)
		time.Sleep(metrics.ScrapeCache)
		for range 3 {
			_, err := reg.Gather()
			require.ErrorContains(t, err, "count river jobs: database down")
		}
		require.Equal(t, int64(3), jobReads.Load(), "the failure is kept too")
	})
}

// gauge is the value of the one sample of metric name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
