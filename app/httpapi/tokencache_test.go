package httpapi

import (
	"testing"
	"time"

	"erp/db"
)

func TestTokenCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	u := db.User{ID: 7, Login: "clerk", Role: db.RoleViewer}
	soon := now.Add(tokenCacheTTL / 2)
	tests := []struct {
		name    string
		expires *time.Time
		clear   bool // between the lookup and put
		at      time.Duration
		want    bool
	}{
		{"fresh", nil, false, tokenCacheTTL - time.Nanosecond, true},
		{"past its TTL", nil, false, tokenCacheTTL, false},
		{"token expires before the TTL", &soon, false, tokenCacheTTL / 2, false},
		{"before the token expires", &soon, false, tokenCacheTTL/2 - time.Nanosecond, true},
		{"cleared while looking up", nil, true, 0, false},
	}
	for _, tt := range tests {
		var c tokenCache
		gen := c.generation()
		if tt.clear {
			c.clear()
		}
		c.put(gen, "k", u, tt.expires, now)
		got, ok := c.get("k", now.Add(tt.at))
		if ok != tt.want || (ok && !got.Same(u)) {
			t.Errorf("%s: get = %v, %v; want %v", tt.name, got, ok, tt.want)
		}
	}
	var c tokenCache
	c.put(c.generation(), "k", u, nil, now)
	c.clear()
	if _, ok := c.get("k", now); ok {
		t.Error("an owner survived clear")
	}
}
