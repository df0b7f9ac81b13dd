package db

import (
	"testing"
	"time"
)

// A rate token's wait is positive and bounded however small the rate:
// (1 − 0) / 1e-10 s is 1e19 ns, past time.Duration's range.
func TestTokenWait(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tokens, rate float64
		want         time.Duration
	}{
		{0, 4, 250 * time.Millisecond},
		{0.5, 1, 500 * time.Millisecond},
		{0, MinRatePerSecond, 1000 * time.Second},
		{0, 1e-10, 24 * time.Hour},
		{0, 1e-300, 24 * time.Hour},
	} {
		if got := tokenWait(tt.tokens, tt.rate); got != tt.want {
			t.Errorf("tokenWait(%v, %v) = %v, want %v", tt.tokens, tt.rate, got, tt.want)
		}
	}
}
