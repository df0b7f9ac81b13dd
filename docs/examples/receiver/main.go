// Command receiver is a webhook receiver for the ERP's events: it verifies
// each request's Standard Webhooks signature, validates the event against
// the schema the server publishes for its type, and de-duplicates by
// webhook-id. It takes both formats (STANDARD_WEBHOOKS and CLOUDEVENTS).
//
//	WEBHOOK_SECRET=whsec_… ERP_URL=https://erp.example.com ERP_TOKEN=… go run ./docs/examples/receiver
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func main() {
	h, err := newReceiver(os.Getenv("WEBHOOK_SECRET"), os.Getenv("ERP_URL"), os.Getenv("ERP_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":3000", h))
}

// receiver handles the ERP's webhook requests.
type receiver struct {
	verifier *standardwebhooks.Webhook
	erpURL   string // where GET /schemas/events/<type>.json is served
	token    string // any signed-in token may read the schemas

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema // by URL, fetched once
	seen    map[string]bool               // webhook-ids handled (keep them in your database)
}

func newReceiver(secret, erpURL, token string) (*receiver, error) {
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("WEBHOOK_SECRET: %w", err)
	}
	return &receiver{verifier: verifier, erpURL: erpURL, token: token,
		schemas: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}, nil
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	// The body's bytes as they came: verify before parsing.
	if err := rc.verifier.Verify(body, r.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	// A CloudEvent carries the event as data and names its schema;
	// the standard format's body is the event itself.
	var envelope struct {
		Type       string          `json:"type"`
		DataSchema string          `json:"dataschema"`
		Data       json.RawMessage `json:"data"`
		ErpTest    bool            `json:"erptest"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		http.Error(w, "not JSON", http.StatusBadRequest)
		return
	}
	event, schemaURL := body, rc.erpURL+"/schemas/events/"+envelope.Type+".json"
	if envelope.Data != nil {
		event = envelope.Data
		// Followed only under ERP_URL: the token goes nowhere else.
		if strings.HasPrefix(envelope.DataSchema, rc.erpURL+"/") {
			schemaURL = envelope.DataSchema
		}
	}
	if err := rc.validate(schemaURL, event); err != nil {
		// Permanent for this event: a 4xx makes it a dead letter at once.
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	id := r.Header.Get("webhook-id")
	test := r.Header.Get("X-Erp-Test") == "true" || envelope.ErpTest
	rc.mu.Lock()
	duplicate := rc.seen[id]
	rc.seen[id] = true
	rc.mu.Unlock()
	log.Printf("%s %s: verified and valid (duplicate %v, test %v)", id, envelope.Type, duplicate, test)
	w.WriteHeader(http.StatusNoContent)
}

// validate checks event against the JSON Schema at url.
func (rc *receiver) validate(url string, event []byte) error {
	rc.mu.Lock()
	schema, ok := rc.schemas[url]
	rc.mu.Unlock()
	if !ok {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		c.UseLoader(rc) // fetches url with the token
		s, err := c.Compile(url)
		if err != nil {
			return fmt.Errorf("schema %s: %w", url, err)
		}
		rc.mu.Lock()
		rc.schemas[url], schema = s, s
		rc.mu.Unlock()
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event))
	if err != nil {
		return err
	}
	return schema.Validate(doc)
}

// Load implements jsonschema.URLLoader: GET url with the token.
func (rc *receiver) Load(url string) (any, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+rc.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return jsonschema.UnmarshalJSON(resp.Body)
}
