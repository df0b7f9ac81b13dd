package main

import (
	"context"
	"errors"
	"log/slog"
)

func runDemo(ctx context.Context, cfg config, logger *slog.Logger) error {
	return errors.New("demo: not yet")
}
