package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxResponseBytes bounds what the client reads of one response; the
// largest the demo asks for is a page of 500 events.
const maxResponseBytes = 32 << 20

// client talks GraphQL over HTTP to one endpoint as one user.
type client struct {
	endpoint string
	token    string
	http     *http.Client
}

// Error is the GraphQL errors of one response, also of a refused request
// (HTTP 401 with a GraphQL error body).
type Error struct {
	Status int // HTTP status of the response
	Errors []ErrorEntry
}

// ErrorEntry is one entry of a GraphQL response's errors.
type ErrorEntry struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code is extensions.code of the first error, "" when it has none.
func (e *Error) Code() string {
	if len(e.Errors) == 0 {
		return ""
	}
	code, _ := e.Errors[0].Extensions["code"].(string)
	return code
}

func (e *Error) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, x := range e.Errors {
		code, _ := x.Extensions["code"].(string)
		if code == "" {
			code = "NO_CODE"
		}
		msgs[i] = code + ": " + x.Message
		if field, ok := x.Extensions["field"].(string); ok && field != "" {
			msgs[i] += " (field " + field + ")"
		}
	}
	return strings.Join(msgs, "; ")
}

// Code is the extensions.code of err when it is (or wraps) an *Error, else "".
func Code(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code()
	}
	return ""
}

// post sends one GraphQL request and returns its data. GraphQL errors in the
// response, whatever the HTTP status, are an *Error; a response that is not
// GraphQL JSON (a proxy's error page) is an error with its status and the
// start of its body.
func (c *client) post(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	// The body is read (up to the limit) and the answer is in raw; closing
	// it can only fail for a connection the transport discards anyway.
	_ = res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	var gr struct {
		Data   json.RawMessage `json:"data"`
		Errors []ErrorEntry    `json:"errors"`
	}
	if err := json.Unmarshal(raw, &gr); err != nil {
		snippet := string(raw)
		if len(snippet) > 200 {
			snippet = snippet[:200] + "…"
		}
		return nil, fmt.Errorf("http %d from %s: not a GraphQL response: %q", res.StatusCode, c.endpoint, snippet)
	}
	if len(gr.Errors) > 0 {
		return nil, &Error{Status: res.StatusCode, Errors: gr.Errors}
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("http %d from %s without GraphQL errors", res.StatusCode, c.endpoint)
	}
	return gr.Data, nil
}

// call posts query and decodes its data into a T.
func call[T any](ctx context.Context, c *client, query string, vars map[string]any) (T, error) {
	var v T
	data, err := c.post(ctx, query, vars)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("decode response data: %w", err)
	}
	return v, nil
}

// exec posts a mutation whose answer the demo does not need.
func (c *client) exec(ctx context.Context, query string, vars map[string]any) error {
	_, err := c.post(ctx, query, vars)
	return err
}
