// Command erp is the ERP event backbone: a GraphQL API whose mutations write
// documents, their journal events and their River dispatch jobs in one
// transaction, dispatch the events to subscribers, and push processed events
// live to websocket subscribers.
//
// Subcommands: serve (the default), migrate, demo, user. Configuration comes
// from the environment, mirrored by flags: erp <subcommand> -help lists
// them (package app/config).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"erp/app"
	"erp/app/config"
	"erp/demo"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one subcommand and returns the process exit code: 0, 1 when
// the subcommand failed, 2 for a bad command line or setting.
func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve", "migrate", "demo", "user":
	default:
		fmt.Fprintf(os.Stderr, "erp: unknown subcommand %q (serve, migrate, demo, user)\n", cmd)
		return 2
	}
	cfg, err := config.Parse(cmd, args, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "erp:", err)
		return 2
	}
	logger := app.NewLogger(cfg, os.Stderr)
	ctx, stop := app.NotifyShutdown(context.Background(), logger)
	defer stop()

	switch cmd {
	case "serve":
		err = app.Serve(ctx, cfg, logger, os.Stdout)
	case "migrate":
		err = app.Migrate(ctx, cfg, logger)
	case "user":
		err = app.CreateUser(ctx, cfg, logger, os.Stdout)
	case "demo":
		err = demo.Run(ctx, demo.Config{URL: cfg.DemoURL, Token: cfg.DemoToken, DataDir: cfg.DataDir}, logger)
	}
	if err != nil {
		logger.Error(cmd+" failed", slog.String("error", err.Error()))
		return 1
	}
	return 0
}
