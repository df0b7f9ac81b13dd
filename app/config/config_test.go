package config_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"erp/app/config"
	"erp/db"
)

func TestParseConfigNamesEachBadSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		setting, value string
		flag           bool // given as a flag instead of the variable
	}{
		{"DATABASE_URL", "postgres://host:notaport/db", false},
		{"DATA_DIR", " ", false},
		{"ADDR", "localhost", false},
		{"ADDR", ":99999", false},
		{"DISPATCH_INTERVAL", "10ms", false},
		{"DISPATCH_INTERVAL", "soon", true},
		{"ADMIN_TOKEN", "two words", false},
		{"ADMIN_TOKEN", "short-and-guessable", false},
		{"ADMIN_TOKEN", strings.Repeat("x", config.MinAdminTokenLength-1), true},
		{"TRUSTED_PROXIES", "10.0.0.0/33", false},
		{"TRUSTED_PROXIES", "proxy.internal", false},
		{"COOKIE_SECURE", "yes please", false},
		{"ALLOWED_ORIGINS", "not an origin", false},
		{"DEMO_URL", "localhost:8080", false},
		{"DEMO_TOKEN", "a\tb", false},
		{"PUBLIC_URL", "erp.example.com", false},
		{"PUBLIC_URL", "https://erp.example.com/?x=1", false},
		{"TIME_ZONE", "Mars/Olympus", false},
		{"SHUTDOWN_TIMEOUT", "0s", false},
		{"SHUTDOWN_TIMEOUT", "-5s", true},
		{"RETENTION", "10m", false},
		{"RETENTION", "week", true},
		{"IDEMPOTENCY_TTL", "30s", false},
		{"IDEMPOTENCY_TTL", "a day", true},
		{"FEED_MAX_LAG", "0", false},
		{"FEED_MAX_LAG", "lots", true},
		{"FEED_WRITE_TIMEOUT", "100ms", false},
		{"FEED_WRITE_TIMEOUT", "slow", true},
		{"LOG_FORMAT", "xml", false},
		{"LOG_LEVEL", "loud", false},
		{"LOG_LEVEL", "verbose", true},
		{"INTROSPECTION", "maybe", false},
		{"PLAYGROUND", "nah", true},
		{"PPROF_ADDR", ":6060", false}, // every interface
		{"PPROF_ADDR", "0.0.0.0:6060", false},
		{"PPROF_ADDR", "10.0.0.5:6060", true},
		{"PPROF_ADDR", "localhost", false},
		{"METRICS_ADDR", "9090", false},
		{"METRICS_ADDR", ":8080", true}, // ADDR's
		{"METRICS_TOKEN", "two words of a token that is long enough", false},
		{"METRICS_TOKEN", strings.Repeat("x", config.MinAdminTokenLength-1), true},
	}
	for _, tt := range tests {
		t.Run(tt.setting+"="+tt.value, func(t *testing.T) {
			env := map[string]string{}
			var args []string
			if tt.flag {
				args = []string{"-" + strings.ReplaceAll(strings.ToLower(tt.setting), "_", "-"), tt.value}
			} else {
				env[tt.setting] = tt.value
			}
			_, err := config.Parse("serve", args, func(k string) string { return env[k] }, io.Discard)
			require.Error(t, err)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, tt.setting+": "), "got %q", msg)
			require.NotContains(t, msg, "\n", "one error only")
		})
	}

	// The user subcommand's own flags, before anything starts: a negative
	// lifetime must not become a token that never expires.
	for _, args := range [][]string{
		{"-login", "x2", "-token-ttl", "-5h"},
		{"-login", "x2", "-role", "boss"},
		{"-login", "x2", "-sources", "shop", "-role", "sales"},
		{"-login", "x2", "-sources", "shop,erp", "-role", "integration"},
		{"-login", "x2", "-sources", " ", "-role", "integration"},
	} {
		_, err := config.Parse("user", args, func(string) string { return "" }, io.Discard)
		require.Error(t, err, "%v", args)
		require.True(t, strings.HasPrefix(err.Error(), args[2]+": "), "got %q", err)
	}
	cfg, err := config.Parse("user", []string{"-login", "x2", "-role", db.RoleSales, "-token-ttl", "720h"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, cfg.User.TokenTTL)
	cfg, err = config.Parse("user", []string{"-login", "x2", "-role", db.RoleIntegration, "-sources", "crm, shop"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{db.SourceCRM, db.SourceShop}, cfg.User.SourceList())

	// All bad at once: one line each.
	env := map[string]string{"LOG_LEVEL": "loud", "RETENTION": "1s", "ADDR": "x"}
	_, err = config.Parse("serve", nil, func(k string) string { return env[k] }, io.Discard)
	require.Error(t, err)
	require.Len(t, strings.Split(err.Error(), "\n"), 3, "got %q", err)

	// The defaults are valid.
	cfg, err = config.Parse("serve", nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, 7*24*time.Hour, cfg.Retention)
	require.Equal(t, 24*time.Hour, cfg.IdempotencyTTL)
}

func TestServeHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.ErrorIs(t, help(func(string) string { return "" }, &out), flag.ErrHelp)
	for _, setting := range []string{"DATABASE_URL", "DATABASE_DIRECT_URL", "DATA_DIR", "ADDR", "DISPATCH_INTERVAL", "ADMIN_TOKEN", "ALLOWED_ORIGINS",
		"DEMO_URL", "DEMO_TOKEN", "TIME_ZONE", "SHUTDOWN_TIMEOUT", "RETENTION", "IDEMPOTENCY_TTL", "LOG_FORMAT", "LOG_LEVEL", "PPROF_ADDR", "TRUSTED_PROXIES", "COOKIE_SECURE", "METRICS_ADDR", "METRICS_TOKEN", "PUBLIC_URL"} {
		require.Contains(t, out.String(), "("+setting+")")
	}
	require.Contains(t, out.String(), `(default "15s")`)
}

func TestServeHelpPrintsNoSecrets(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://erp:s3cret@db/erp", "DATABASE_DIRECT_URL": "postgres://erp:s3cret2@db/erp", "ADMIN_TOKEN": "admin-secret-of-32-characters-or-more", "DEMO_TOKEN": "demo-secret",
		"METRICS_TOKEN": "metrics-secret-of-32-characters-or-more"}
	var out bytes.Buffer
	require.ErrorIs(t, help(func(k string) string { return env[k] }, &out), flag.ErrHelp)
	for _, secret := range []string{"s3cret", "s3cret2", "admin-secret-of-32-characters-or-more", "demo-secret", "metrics-secret-of-32-characters-or-more"} {
		require.NotContains(t, out.String(), secret)
	}
	cfg, err := config.Parse("serve", nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, env["DATABASE_URL"], cfg.DatabaseURL)
	require.Equal(t, env["ADMIN_TOKEN"], cfg.AdminToken)
	cfg, err = config.Parse("serve", []string{"-admin-token", "flag-wins-with-32-characters-or-more"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "flag-wins-with-32-characters-or-more", cfg.AdminToken)

	// A too short token is refused without repeating it.
	env["ADMIN_TOKEN"] = "short-secret"
	_, err = config.Parse("serve", nil, func(k string) string { return env[k] }, io.Discard)
	require.EqualError(t, err, "ADMIN_TOKEN: want at least 32 characters (erp user prints one: erp_ and 43 random characters), got 12")
}

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
		cfg, err := config.Parse("serve", args, getenv, io.Discard)
		if tt.want == "" {
			require.ErrorContains(t, err, "TIME_ZONE", "env %q flag %q", tt.env, tt.flag)
			continue
		}
		require.NoError(t, err, "env %q flag %q", tt.env, tt.flag)
		require.Equal(t, tt.want, cfg.TimeZone, "env %q flag %q", tt.env, tt.flag)
	}
}

func TestConfigAllowedOrigins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  string
		args []string
		want []string
		ok   bool
	}{
		{"", nil, nil, true},
		{"https://erp.example.com, http://localhost:5173", nil, []string{"https://erp.example.com", "http://localhost:5173"}, true},
		{"https://erp.example.com", []string{"-allowed-origins", "*"}, []string{"*"}, true},
		{"erp.example.com", nil, nil, false},
	}
	for _, tt := range tests {
		getenv := func(k string) string {
			if k == "ALLOWED_ORIGINS" {
				return tt.env
			}
			return ""
		}
		cfg, err := config.Parse("serve", tt.args, getenv, io.Discard)
		if !tt.ok {
			require.Error(t, err, "ALLOWED_ORIGINS=%q", tt.env)
			require.Contains(t, err.Error(), "ALLOWED_ORIGINS")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, cfg.AllowedOrigins)
	}
}

func TestPprofAddrIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:6060", "localhost:0", "[::1]:6060"} {
		cfg, err := config.Parse("serve", nil, func(k string) string { return map[string]string{"PPROF_ADDR": addr}[k] }, io.Discard)
		require.NoError(t, err, addr)
		require.Equal(t, addr, cfg.PprofAddr)
	}
}

// help runs "erp serve -help" against getenv, printing to out.
func help(getenv func(string) string, out io.Writer) error {
	_, err := config.Parse("serve", []string{"-help"}, getenv, out)
	return err
}

func TestDefaultIsTheEmptyEnvironment(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	require.Equal(t, time.Minute, cfg.DispatchInterval)
	require.Equal(t, ":8080", cfg.Addr)
	require.True(t, cfg.Introspection)
	require.True(t, cfg.Playground)
	require.Equal(t, "Europe/Moscow", cfg.TimeZone)
	require.Empty(t, cfg.AllowedOrigins)
}

// TestConfigurationDocIsCurrent: docs/configuration.md is what
// WriteMarkdown makes of Config today (make generate rewrites it).
func TestConfigurationDocIsCurrent(t *testing.T) {
	var want strings.Builder
	require.NoError(t, config.WriteMarkdown(&want))
	got, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	require.Equal(t, want.String(), string(got), "docs/configuration.md is stale: run make generate")
}

func TestParseConfigNatsSettings(t *testing.T) {
	t.Parallel()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	dir := t.TempDir()
	seedFile, junk := filepath.Join(dir, "erp.nk"), filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	require.NoError(t, os.WriteFile(junk, []byte("not a key"), 0o600))
	missing := filepath.Join(dir, "missing")
	for _, tt := range []struct {
		env     map[string]string
		setting string // "": accepted
	}{
		{map[string]string{"NATS_URL": "nats://localhost:4222", "NATS_NKEY_SEED": seedFile}, ""},
		{map[string]string{"NATS_URL": "tls://a:4222, tls://b:4222", "NATS_CREDS": seedFile}, ""},
		{map[string]string{"NATS_URL": "nats://localhost:4222", "NATS_NKEY_SEED": missing}, "NATS_NKEY_SEED"},
		{map[string]string{"NATS_URL": "nats://localhost:4222", "NATS_NKEY_SEED": junk}, "NATS_NKEY_SEED"},
		{map[string]string{"NATS_URL": "nats://localhost:4222", "NATS_CREDS": missing}, "NATS_CREDS"},
		{map[string]string{"NATS_URL": "tls://localhost:4222", "NATS_CA": junk}, "NATS_CA"},
		{map[string]string{"NATS_URL": "nats://localhost:4222", "NATS_NKEY_SEED": seedFile, "NATS_CREDS": seedFile}, "NATS_NKEY_SEED"},
		{map[string]string{"NATS_URL": "http://localhost:4222"}, "NATS_URL"},
		{map[string]string{"NATS_URL": "nats://a:4222,localhost"}, "NATS_URL"},
		{map[string]string{"NATS_NKEY_SEED": seedFile}, "NATS_NKEY_SEED"},
		{map[string]string{"NATS_CREDS": seedFile}, "NATS_CREDS"},
		{map[string]string{"NATS_CA": seedFile}, "NATS_CA"},
	} {
		_, err := config.Parse("serve", nil, func(k string) string { return tt.env[k] }, io.Discard)
		if tt.setting == "" {
			require.NoError(t, err, tt.env)
			continue
		}
		require.Error(t, err, tt.env)
		require.True(t, strings.HasPrefix(err.Error(), tt.setting+": "), "got %q", err)
		require.NotContains(t, err.Error(), "\n", "one error only")
	}
}
