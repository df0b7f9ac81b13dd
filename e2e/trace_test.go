package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"erp/app/apptest"
	"erp/db/pgtest"
)

// The binary traces when OTEL_EXPORTER_OTLP_ENDPOINT is set: its spans
// reach the OTLP/HTTP collector under OTEL_SERVICE_NAME, and those still
// queued at SIGTERM are flushed by the shutdown (the batch delay here is
// longer than the test).
func TestProcessTracesFlushedAtShutdown(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var services, names []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					names = append(names, sp.Name)
				}
			}
		}
	}))
	t.Cleanup(collector.Close)
	token := adminToken(t)
	a := startChild(t, pgtest.NewDB(t), token,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_SERVICE_NAME=erp-e2e", "OTEL_BSP_SCHEDULE_DELAY=600000")
	apptest.GQL[map[string]any](t, clientFor(a, token), `mutation { createItem(input: {sku: "T1", name: "Стол", unit: "шт"}) { id } }`, nil)
	mu.Lock()
	require.NotContains(t, names, "mutation createItem", "exported before the shutdown")
	mu.Unlock()

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit")
	}
	require.Equal(t, 0, a.cmd.ProcessState.ExitCode())
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, names, "mutation createItem")
	require.Contains(t, names, "query ItemInsert")
	require.Contains(t, services, "erp-e2e")
}
