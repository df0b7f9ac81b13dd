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
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs … by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	_, stop, err = startListener("PPROF_ADDR", addr, mux, logger)
	return stop, err
}

// startListener serves h on addr, the value of setting, on a server of its
// own; bound is the address it listens on (addr's port 0 resolved). stop
// shuts it down, waiting at most until ctx ends, then closes what is still
// open.
func startListener(setting, addr string, h http.Handler, logger *slog.Logger) (bound net.Addr, stop func(ctx context.Context), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s %s: %w", setting, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("listener failed", slog.String("setting", setting), slog.String("error", err.Error()))
		}
	}()
	logger.Info("listening", slog.String("setting", setting), slog.String("addr", ln.Addr().String()))
	return ln.Addr(), func(ctx context.Context) {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close() // e.g. a CPU profile in progress holds its request open
		}
		<-done
	}, nil
}
