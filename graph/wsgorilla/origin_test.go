package wsgorilla

import (
	"net/http/httptest"
	"testing"
)

func TestAllowOrigins(t *testing.T) {
	t.Parallel()
	check, err := AllowOrigins([]string{"https://erp.example.com", " http://localhost:5173 ", ""})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, origin string
		want         bool
	}{
		{"api.example.com", "", true}, // not a browser
		{"api.example.com", "https://api.example.com", true},
		{"API.example.com", "http://api.example.com", true}, // same host, as gorilla compares
		{"api.example.com", "https://erp.example.com", true},
		{"api.example.com", "https://ERP.Example.com:443", true},
		{"api.example.com", "http://localhost:5173", true},
		{"api.example.com", "http://localhost:5174", false},
		{"api.example.com", "http://erp.example.com", false},
		{"api.example.com", "https://erp.example.com.evil.io", false},
		{"api.example.com", "null", false},
		{"api.example.com", "::not a url", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://"+tt.host+"/graphql", nil)
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if got := check(r); got != tt.want {
			t.Errorf("Host %s, Origin %q: got %v, want %v", tt.host, tt.origin, got, tt.want)
		}
	}

	all, err := AllowOrigins([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://api.example.com/graphql", nil)
	r.Header.Set("Origin", "https://anywhere.example")
	if !all(r) {
		t.Error("* must allow every origin")
	}

	for _, bad := range []string{"erp.example.com", "ftp://erp.example.com", "https://erp.example.com/app", "https://user@erp.example.com", "https://"} {
		if _, err := AllowOrigins([]string{bad}); err == nil {
			t.Errorf("AllowOrigins(%q): want an error", bad)
		}
	}
}
