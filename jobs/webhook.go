package jobs

// TEMPORARY stub with the agreed API; replaced by the webhook branch.

import (
	"context"
	"errors"
	"time"
)

type WebhookConfig struct {
	URL     string
	Secret  string
	Timeout time.Duration
}

type WebhookResult struct {
	Status     int
	Body       string
	Duration   time.Duration
	Err        error
	Permanent  bool
	RetryAfter time.Duration
}

type WebhookSender struct{}

func NewWebhookSender() *WebhookSender { return &WebhookSender{} }

func (s *WebhookSender) Send(ctx context.Context, cfg WebhookConfig, eventID int64, body []byte) WebhookResult {
	return WebhookResult{Err: errors.New("stub"), Permanent: true}
}

func ValidateWebhookURL(raw string) error { return nil }
