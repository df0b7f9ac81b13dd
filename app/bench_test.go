package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"erp/app/apptest"
	"erp/app/config"
	"erp/db"
	"erp/db/pgtest"
)

// BenchmarkCreateSalesOrder drives createSalesOrder (one line) over HTTP
// against the whole in-process server, as bench's figure A does, so that
// `go test -run '^$' -bench CreateSalesOrder -cpuprofile cpu.prof .` shows
// where the server's CPU goes per mutation (the profile includes this
// client and River working the resulting jobs).
func BenchmarkCreateSalesOrder(b *testing.B) {
	benchmarkCreateSalesOrder(b, apptest.New(b))
}

// BenchmarkCreateSalesOrderTraced is BenchmarkCreateSalesOrder with every
// span made (the operation's, each statement's, River's, the dispatch's)
// and batched to an exporter that drops them: the cost of tracing on.
func BenchmarkCreateSalesOrderTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(b.Context())) })
	pool, err := db.Connect(b.Context(), pgtest.NewDB(b), db.TraceStatements(tp))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	benchmarkCreateSalesOrder(b, apptest.NewOn(b, pool, func(c *config.Config) { c.TracerProvider = tp }))
}

func benchmarkCreateSalesOrder(b *testing.B, s *apptest.Server) {
	apptest.GQL[map[string]any](b, s, `mutation { createItem(input: {sku: "BENCH-1", name: "Стол", unit: "шт"}) { id } }`, nil)
	body, err := json.Marshal(map[string]any{
		"query":     `mutation($c: String!) { createSalesOrder(input: {customer: $c, lines: [{sku: "BENCH-1", quantity: "1", price: "10"}]}) { id number } }`,
		"variables": map[string]any{"c": "ООО Бенч"},
	})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetParallelism(4) // 4 × GOMAXPROCS clients, like figure A's 8 on 2 cores
	apiBefore, workBefore := s.DB.Pool.Stat(), s.DB.Work.Stat()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, s.URL+"/graphql", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+s.Token)
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			raw, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK || bytes.Contains(raw, []byte(`"errors"`)) {
				b.Errorf("HTTP %d: %s (%v)", res.StatusCode, raw, err)
				return
			}
		}
	})
	b.StopTimer()
	// How long connections were waited for, per mutation: on the API's
	// pool (the requests) and on the work pool (River's workers).
	apiAfter, workAfter := s.DB.Pool.Stat(), s.DB.Work.Stat()
	b.ReportMetric(float64((apiAfter.AcquireDuration()-apiBefore.AcquireDuration()).Microseconds())/float64(b.N), "api-wait-µs/op")
	b.ReportMetric(float64((workAfter.AcquireDuration()-workBefore.AcquireDuration()).Microseconds())/float64(b.N), "work-wait-µs/op")
	b.ReportMetric(float64(apiAfter.AcquireCount()-apiBefore.AcquireCount()+workAfter.AcquireCount()-workBefore.AcquireCount())/float64(b.N), "acquires/op")
}
