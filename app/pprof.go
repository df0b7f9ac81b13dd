package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves net/http/pprof at /debug/pprof/ on addr (PPROF_ADDR,
// a loopback address checked by config.Parse), on a server of its own so
// that nothing of it reaches the API's mux or DefaultServeMux. The
// returned stop shuts it down, waiting at most until ctx ends; a profile
// being taken is cut off then.
func startPprof(addr string, logger *slog.Logger) (stop func(ctx context.Context), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on PPROF_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs … by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("pprof listener failed", slog.String("error", err.Error()))
		}
	}()
	logger.Info("profiling", slog.String("pprof_addr", ln.Addr().String()), slog.String("path", "/debug/pprof/"))
	return func(ctx context.Context) {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close() // a CPU profile in progress holds its request open
		}
		<-done
	}, nil
}
