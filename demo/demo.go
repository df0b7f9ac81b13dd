// Package demo is the client that replays the seed's business day against a
// running server through its public GraphQL API, and an afternoon after it
// that moves the day's documents through their lifecycles, then prints the
// resulting journal as the "Поток событий" screen the system was specified
// from (demo/testdata/seed-*.txt) and a summary line.
//
// It knows the server only as an HTTP endpoint and a bearer token: what it
// does, any other client of the API can do. The day itself is data
// (day.json, embedded, read by SeedDay), so that what is replayed can be
// read and checked against the seed screens without reading code; Replay
// holds the steps that send it, in the order that gives the seed's numbers.
// WriteTable prints events as the seed's screen.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// adminTokenFile is the file in the server's data directory where the server
// writes the administrator's token on its first start.
const adminTokenFile = "admin-token"

// Config is what the demo needs to reach the server.
type Config struct {
	// URL is the GraphQL endpoint, e.g. http://localhost:8080/graphql.
	URL string
	// Token is the bearer token to send; empty reads DataDir/admin-token.
	Token string
	// DataDir is the server's data directory, read only for the token.
	DataDir string
}

// Run replays the seed's business day and its afternoon (Replay) against
// the server at cfg.URL and prints the journal table and the summary to stdout. A refused connection
// comes back with a hint to start the server; a GraphQL error is an *Error.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	token, err := cfg.token()
	if err != nil {
		return err
	}
	logger.Info("demo: replaying the seed's business day", slog.String("url", cfg.URL))
	sum, err := Replay(ctx, cfg.URL, token, os.Stdout)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return fmt.Errorf("%w (is the server running at %s? start it with make run)", err, cfg.URL)
		}
		return err
	}
	logger.Info("demo: done", slog.Int("events", sum.Events), slog.Int("afternoon_events", sum.Afternoon.Events),
		slog.Int("duplicates", sum.Duplicates))
	return nil
}

// token returns the bearer token the demo uses: cfg.Token, else the trimmed
// contents of DataDir/admin-token. The errors say how to get one, since a
// first-time user running `make demo` before `make run` lands here.
func (cfg Config) token() (string, error) {
	if t := strings.TrimSpace(cfg.Token); t != "" {
		return t, nil
	}
	path := filepath.Join(cfg.DataDir, adminTokenFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no token for the demo: set DEMO_TOKEN (the server's ADMIN_TOKEN) or start the server first with `make run`, which writes %s", path)
	}
	if err != nil {
		return "", fmt.Errorf("read demo token %s: %w", path, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("no token for the demo: %s is empty; set DEMO_TOKEN", path)
	}
	return token, nil
}
