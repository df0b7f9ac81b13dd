package httpapi

import (
	"net/http"
	"testing"

	"erp/db"
)

func TestKeptAnswers(t *testing.T) {
	t.Parallel()
	busy := `{"message":"` + db.ErrBusy.Error() + `","extensions":{"code":"CONFLICT"}}`
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"ran", http.StatusOK, `{"data":{"createItem":{"id":"1"}}}`, true},
		{"ran and failed", http.StatusOK, `{"errors":[{"message":"unknown sku","extensions":{"code":"BAD_USER_INPUT"}}],"data":null}`, true},
		{"internal: whether it wrote is not known", http.StatusOK, `{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}],"data":null}`, true},
		{"busy: nothing written, try again", http.StatusOK, `{"errors":[` + busy + `],"data":null}`, false},
		{"busy, every root field null", http.StatusOK, `{"errors":[` + busy + `],"data":{"a":null}}`, false},
		{"busy after another root field wrote", http.StatusOK, `{"errors":[` + busy + `],"data":{"a":{"id":"1"},"b":null}}`, true},
		{"busy and another error", http.StatusOK, `{"errors":[` + busy + `,{"message":"internal error"}],"data":null}`, true},
		{"not valid: never ran", http.StatusOK, `{"errors":[{"message":"x","extensions":{"code":"GRAPHQL_VALIDATION_FAILED"}}]}`, false},
		{"not valid, graphql-response+json", http.StatusBadRequest, `{"errors":[{"message":"x"}]}`, false},
		{"server failed", http.StatusServiceUnavailable, `{"errors":[{"message":"internal error"}]}`, false},
		{"not JSON", http.StatusOK, `oops`, false},
	}
	for _, tt := range tests {
		got := kept(db.IdempotentAnswer{Status: tt.status, ContentType: mediaJSON, Body: []byte(tt.body)})
		if got != tt.want {
			t.Errorf("%s: kept(%d %s) = %v, want %v", tt.name, tt.status, tt.body, got, tt.want)
		}
	}
}
