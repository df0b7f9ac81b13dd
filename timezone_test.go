package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTimeZoneConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env, flag string
		want      string // zone name; "" means an error
	}{
		{want: "Europe/Moscow"},
		{env: "Asia/Yekaterinburg", want: "Asia/Yekaterinburg"},
		{env: "Asia/Yekaterinburg", flag: "UTC", want: "UTC"},
		{env: "Mars/Olympus"},
		{flag: "Local"},
		{flag: "+03:00"},
	}
	for _, tt := range tests {
		var args []string
		if tt.flag != "" {
			args = []string{"-time-zone", tt.flag}
		}
		getenv := func(key string) string {
			if key == "TIME_ZONE" {
				return tt.env
			}
			return ""
		}
		cfg, err := parseConfig("serve", args, getenv, io.Discard)
		if tt.want == "" {
			require.ErrorContains(t, err, "TIME_ZONE", "env %q flag %q", tt.env, tt.flag)
			continue
		}
		require.NoError(t, err, "env %q flag %q", tt.env, tt.flag)
		require.Equal(t, tt.want, cfg.TimeZone.String(), "env %q flag %q", tt.env, tt.flag)
	}
}
