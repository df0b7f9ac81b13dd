// Package config is every setting of the erp binary in one struct: each
// field names its environment variable, default and help text in tags, and
// Parse mirrors every variable with a flag (DISPATCH_INTERVAL and
// -dispatch-interval; a flag wins over the variable), validates the result
// and prints the table for -help. Tests build the same struct from Default
// and override fields.
package config

import (
	"cmp"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // TIME_ZONE resolves on machines without a zoneinfo database
	"unicode"
	"unicode/utf8"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nkeys"
	"go.opentelemetry.io/otel/trace"

	"erp/app/httpapi"
	"erp/db"
	"erp/graph/wsgorilla"
)

// Config is every setting. Fields tagged env come from that environment
// variable (default envDefault) or its flag; fields tagged flag only are
// flags of one subcommand (cmd); untagged fields are not settable from
// outside: they tune a test's application and zero means the default.
//
// Tags: env and envDefault are caarlos0/env's; help is the flag's text;
// want completes "<VAR>: want …, got <value>" when the value does not
// parse; secret keeps the value out of -help.
type Config struct {
	// DatabaseURL's pool_max_conns, if any, is the total of the server's
	// two pools (app.PoolSizes, db.PoolSizes.Within).
	DatabaseURL string `env:"DATABASE_URL" secret:"true" help:"PostgreSQL URL (a pool_max_conns in it is the total of the server's API and work pools); empty starts a private PostgreSQL in DATA_DIR/pg"`
	// DatabaseDirectURL is a session connection (PostgreSQL itself, or a
	// session-mode pooler) for LISTEN, River's notifications and the
	// migrations when DATABASE_URL is a transaction-pooling proxy.
	DatabaseDirectURL string        `env:"DATABASE_DIRECT_URL" secret:"true" help:"session connection for LISTEN and River when DATABASE_URL is a transaction pooler (PgBouncer); empty: DATABASE_URL for everything"`
	DataDir           string        `env:"DATA_DIR" envDefault:".data" help:"directory for the private PostgreSQL and admin-token"`
	Addr              string        `env:"ADDR" envDefault:":8080" help:"listen address"`
	DispatchInterval  time.Duration `env:"DISPATCH_INTERVAL" envDefault:"1m" help:"period of the sweep of unprocessed events" want:"a duration of at least 1s like 1m or 30s"`
	AdminToken        string        `env:"ADMIN_TOKEN" secret:"true" help:"token of the admin user, at least 32 characters; empty: the first start on a database makes one into DATA_DIR/admin-token"`
	// AllowedOrigins are browser origins (https://host[:port], or *)
	// allowed to call /graphql (CORS) and open websockets besides the
	// server's own, as wsgorilla.AllowOrigins takes them.
	AllowedOrigins []string `env:"ALLOWED_ORIGINS" help:"comma-separated browser origins (https://host[:port], or *) allowed to call /graphql (CORS) and open websockets besides the server's own; clients without Origin are always allowed"`
	// TrustedProxies are the reverse proxies (IP addresses or CIDR
	// prefixes) whose X-Forwarded-For and X-Forwarded-Proto are believed
	// (httpapi.Proxies).
	TrustedProxies []string `env:"TRUSTED_PROXIES" help:"comma-separated addresses or CIDR prefixes of reverse proxies whose X-Forwarded-For (the client address the sign-in limit counts by) and X-Forwarded-Proto (https: the River UI cookie is Secure) are believed; empty: none"`
	// CookieSecure marks River UI's session cookie Secure whatever the
	// request says, for a server reached over HTTPS only.
	CookieSecure bool `env:"COOKIE_SECURE" envDefault:"false" help:"always mark the River UI session cookie Secure (the server is reached over HTTPS only); false: Secure when the request came over TLS or a trusted proxy says https (true|false)" want:"true or false"`
	// Introspection and Playground are on for local runs (the playground
	// reads the schema by introspection); production switches them off.
	// Introspection is held to the request limits like any query.
	Introspection bool   `env:"INTROSPECTION" envDefault:"true" help:"answer GraphQL introspection queries, which the playground needs (true|false)" want:"true or false"`
	Playground    bool   `env:"PLAYGROUND" envDefault:"true" help:"serve the GraphiQL playground at /playground (true|false)" want:"true or false"`
	DemoURL       string `env:"DEMO_URL" envDefault:"http://localhost:8080/graphql" help:"GraphQL endpoint the demo drives"`
	DemoToken     string `env:"DEMO_TOKEN" secret:"true" help:"token the demo uses; empty reads DATA_DIR/admin-token"`
	// TimeZone is the IANA zone the events page shows times in; see
	// LoadTimeZone.
	TimeZone string `env:"TIME_ZONE" envDefault:"Europe/Moscow" help:"IANA time zone the events page shows times in"`
	// ShutdownTimeout bounds the graceful shutdown: websockets, requests
	// and running jobs.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"15s" help:"how long a shutdown waits for websockets, requests and running jobs" want:"a duration of at least 1s like 15s or 1m"`
	// Retention is how long delivered delivery records, the attempt log,
	// River's finished jobs and the auth changes the token watch reads
	// are kept; the journal is kept forever.
	Retention time.Duration `env:"RETENTION" envDefault:"168h" help:"how long delivered delivery records, the attempt log, River's finished jobs and the recorded token revocations and role changes are kept, at least 1h; the journal is kept forever" want:"a duration of at least 1h like 168h (7 days)"`
	// WebhookDisableAfter is how long a webhook may fail continuously
	// before it is disabled (subscriber.disabled, reason failing).
	WebhookDisableAfter time.Duration `env:"WEBHOOK_DISABLE_AFTER" envDefault:"120h" help:"how long a webhook may fail continuously (no delivered attempt) before it is disabled and journals subscriber.disabled; 0 never" want:"a duration like 120h (5 days), or 0 for never"`
	// IdempotencyTTL is how long a mutation's Idempotency-Key and the
	// answer its first request got are kept (httpapi.Idempotency).
	IdempotencyTTL time.Duration `env:"IDEMPOTENCY_TTL" envDefault:"24h" help:"how long an Idempotency-Key of a mutation request and its first answer are kept, at least 1m" want:"a duration of at least 1m like 24h"`
	// LogFormat is "json" or "text"; empty: text when stderr is a
	// terminal, else json.
	LogFormat string `env:"LOG_FORMAT" help:"log format, json or text; empty: text when stderr is a terminal, else json"`
	// LogLevel is the least level logged.
	LogLevel slog.Level `env:"LOG_LEVEL" envDefault:"info" help:"least level logged: debug, info, warn or error" want:"debug, info, warn or error"`
	// PprofAddr is the loopback address of the profiling listener; empty:
	// none.
	PprofAddr string `env:"PPROF_ADDR" help:"loopback host:port serving net/http/pprof at /debug/pprof/, e.g. 127.0.0.1:6060; empty: off"`
	// MetricsAddr moves /metrics to a listener of its own, off the API's
	// port, e.g. an address only Prometheus reaches; empty: /metrics is on
	// ADDR.
	MetricsAddr string `env:"METRICS_ADDR" help:"host:port of a listener of its own serving only /metrics (then not on ADDR), e.g. 10.0.0.5:9090; empty: /metrics is served on ADDR"`
	// MetricsToken, when set, is the bearer token /metrics requires
	// (Authorization: Bearer <token>), wherever it is served.
	MetricsToken string `env:"METRICS_TOKEN" secret:"true" help:"bearer token /metrics requires (Prometheus: authorization.credentials), at least 32 characters; empty: no token"`
	// WebhookAllowPrivate lets webhooks reach loopback, private,
	// link-local, multicast and cloud-metadata addresses; off, such a URL
	// is refused when a webhook is written and again at every connection
	// (jobs.WithAllowPrivate). For on-premise receivers and tests.
	WebhookAllowPrivate bool `env:"WEBHOOK_ALLOW_PRIVATE" envDefault:"false" help:"let webhook URLs reach loopback, private, link-local, multicast and cloud-metadata addresses, for on-premise receivers and tests (true|false)" want:"true or false"`
	// PublicURL is the server's base URL as its users reach it: the
	// CloudEvents dataschema of a delivery points under it.
	PublicURL string `env:"PUBLIC_URL" help:"the server's base URL as clients and receivers reach it, e.g. https://erp.example.com, with the path prefix if a reverse proxy serves it under one; CloudEvents deliveries carry dataschema <PUBLIC_URL>/schemas/events/<type>.json; empty: no dataschema"`
	// NatsURL and its companions are the server's one connection to NATS
	// (jobs.NatsConfig), for NATS subscribers; empty: no NATS.
	NatsURL   string `env:"NATS_URL" help:"NATS server URL(s) for NATS JetStream subscribers, e.g. nats://localhost:4222 (tls:// for TLS, ws:// or wss://; a comma-separated list for a cluster; NATS need not be up at start); empty: no NATS, and createNatsSubscriber is refused"`
	NatsCreds string `env:"NATS_CREDS" help:"NATS credentials file (JWT and NKey seed) to connect with, read at start; needs NATS_URL; empty: none"`
	NatsNKey  string `env:"NATS_NKEY_SEED" help:"NATS NKey seed file to connect with, instead of NATS_CREDS, read at start; needs NATS_URL; empty: none"`
	NatsCA    string `env:"NATS_CA" help:"PEM file of the CA that signed the NATS server's TLS certificate, when the system's roots do not hold it; needs NATS_URL; empty: the system's"`
	// ReplayBatch is how many events one replay batch goes through
	// (jobs.DispatcherConfig.ReplayBatch).
	ReplayBatch int `env:"REPLAY_BATCH" envDefault:"500" help:"events one batch of a subscriber replay goes through (1…10000)" want:"a whole number from 1 to 10000"`

	// FeedMaxLag bounds a live subscriber that fell behind its feed buffer
	// and reads on from the journal: it is closed with 4503 once it is
	// more than FeedMaxLag events behind the feed.
	FeedMaxLag int `env:"FEED_MAX_LAG" envDefault:"100000" help:"events a live subscriber that fell behind may lag the feed while it catches up from the journal, before its socket is closed with 4503" want:"a whole number of at least 1"`
	// FeedWriteTimeout bounds the write of one websocket message: a client
	// that does not take it in time (it reads too slowly, or not at all)
	// is disconnected and resumes from its last cursor.
	FeedWriteTimeout time.Duration `env:"FEED_WRITE_TIMEOUT" envDefault:"10s" help:"how long one websocket message may take to write before the socket is dropped; a live-feed client then resumes from its last cursor and loses nothing" want:"a duration of at least 1s like 10s"`

	// User is the user subcommand's flags.
	User User

	// KeepAlive is the websocket keepalive period; 0: 10s.
	KeepAlive time.Duration
	// InitTimeout is how long a socket may wait to send connection_init
	// (then close 4408); 0: 10s.
	InitTimeout time.Duration
	// SendBuffer caps each websocket's kernel send buffer, in bytes; 0:
	// 256 KiB. A test of slow readers sets a few KiB.
	SendBuffer int
	// APIOnly makes an instance that serves the API and the live feed but
	// works no River jobs: it only enqueues them for the other instances.
	APIOnly bool
	// FeedBuffer is how far, in events, a live subscriber may fall behind
	// before its socket is closed; 0: resolvers.DefaultFeedBuffer.
	FeedBuffer int
	// RetryBase is the wait after a delivery's first failed attempt,
	// doubled after each further one (jobs.RetryPolicy); 0:
	// jobs.DefaultRetryPolicy. A test of retries sets milliseconds.
	RetryBase time.Duration
	// TracerProvider traces GraphQL operations, dispatches, deliveries,
	// River jobs and webhook requests (app.New); nil: tracing off. Serve
	// sets it from the OTEL_* variables (app.StartTracing); a test sets
	// one with an in-memory exporter.
	TracerProvider trace.TracerProvider
}

// User is what the user subcommand creates: a user (unless the login
// exists) and a token for it.
type User struct {
	Login     string        `flag:"login" help:"user: login of the user to create (or reuse)"`
	Name      string        `flag:"name" help:"user: display name (default: the login)"`
	Role      string        `flag:"role" default:"viewer" help:"user: role, one of {roles}"`
	Sources   string        `flag:"sources" help:"user: the order sources an integration account receives for, comma-separated: shop, crm (required with -role integration; given for an existing integration account, replaces its sources)"`
	TokenName string        `flag:"token-name" default:"cli" help:"user: a label for the token"`
	TokenTTL  time.Duration `flag:"token-ttl" help:"user: token lifetime, e.g. 720h; 0 never expires"`
}

// SourceList is Sources as a list: [] for "", ["shop", "crm"] for "shop, crm".
func (u User) SourceList() []string { return trimmed(strings.Split(u.Sources, ",")) }

// MinAdminTokenLength is the fewest characters ADMIN_TOKEN may have: a
// token an operator makes up must not be guessable.
const MinAdminTokenLength = 32

// Default is the configuration of an empty environment and no flags.
func Default() Config {
	cfg, err := Parse("serve", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		panic("config: the defaults do not validate: " + err.Error())
	}
	return cfg
}

// Parse reads the settings of subcommand cmd from args and getenv (a flag
// wins over its variable; an empty variable counts as unset) and validates
// every one. The error names each bad setting, one line each; -help prints
// the table to stderr and returns flag.ErrHelp.
func Parse(cmd string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fields := settings()
	fs := flag.NewFlagSet("erp "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: erp %s [flags]\n\nEvery flag mirrors the environment variable named in its text; a flag wins over the variable.\nDefaults shown are what applies now (the variable's value when set).\n\n", cmd)
		fs.PrintDefaults()
	}
	raw := map[string]string{} // the value of each set variable, flags applied
	flags := map[string]*string{}
	for _, f := range fields {
		if v := getenv(f.env); v != "" {
			raw[f.env] = v
		}
		shown := cmp.Or(raw[f.env], f.def)
		if f.secret {
			// A secret may be in the environment: -help must not print it.
			shown = ""
		}
		flags[f.env] = fs.String(f.flag, shown, fmt.Sprintf("%s (%s)", f.help, f.env))
	}
	var cfg Config
	if cmd == "user" {
		registerFlagsOnly(fs, &cfg.User)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	fs.Visit(func(fl *flag.Flag) {
		for _, f := range fields {
			if f.flag == fl.Name {
				raw[f.env] = *flags[f.env]
			}
		}
	})
	if cmd == "user" && cfg.User.Login == "" {
		return Config{}, errors.New("user: -login is required")
	}
	var errs []error
	failed := map[string]bool{} // variables whose value did not parse
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: raw}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			return Config{}, err
		}
		for _, e := range agg.Errors {
			var pe env.ParseError
			f, ok := setting{}, false
			if errors.As(e, &pe) {
				f, ok = fieldNamed(fields, pe.Name)
			}
			if !ok {
				errs = append(errs, e)
				continue
			}
			failed[f.env] = true
			errs = append(errs, fmt.Errorf("%s: want %s, got %q", f.env, f.want, raw[f.env]))
		}
	}
	cfg.AllowedOrigins = trimmed(cfg.AllowedOrigins)
	cfg.TrustedProxies = trimmed(cfg.TrustedProxies)
	errs = append(errs, validate(cmd, cfg, raw, failed)...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// validate checks what parsing alone does not: ranges, formats and the
// user subcommand's flags. raw holds the text of each set variable, for
// the "got" of a message; failed are the variables already reported as
// not parsing.
func validate(cmd string, cfg Config, raw map[string]string, failed map[string]bool) []error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{setting}, args...)...))
	}
	got := func(key string, v any) string {
		if s, ok := raw[key]; ok {
			return s
		}
		return fmt.Sprint(v)
	}
	if cfg.DatabaseURL != "" {
		if _, err := pgxpool.ParseConfig(cfg.DatabaseURL); err != nil {
			// The parse error may quote the URL, password included.
			bad("DATABASE_URL", "want a PostgreSQL URL like postgres://user:password@host:5432/erp or key=value pairs")
		}
	}
	if cfg.DatabaseDirectURL != "" {
		if _, err := pgxpool.ParseConfig(cfg.DatabaseDirectURL); err != nil {
			bad("DATABASE_DIRECT_URL", "want a PostgreSQL URL like postgres://user:password@host:5432/erp or key=value pairs")
		}
		if cfg.DatabaseURL == "" {
			bad("DATABASE_DIRECT_URL", "needs DATABASE_URL too: it is the session connection beside the transaction pooler DATABASE_URL names")
		}
	}
	if strings.TrimSpace(cfg.DataDir) == "" {
		bad("DATA_DIR", "want a directory, got an empty value")
	}
	if _, port, err := net.SplitHostPort(cfg.Addr); err != nil || !validPort(port) {
		bad("ADDR", "want host:port or :port like :8080, got %q", cfg.Addr)
	}
	if cfg.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(cfg.MetricsAddr); err != nil || !validPort(port) {
			bad("METRICS_ADDR", "want host:port or :port like :9090, got %q", cfg.MetricsAddr)
		} else if cfg.MetricsAddr == cfg.Addr {
			bad("METRICS_ADDR", "want an address other than ADDR's, got %q for both", cfg.MetricsAddr)
		}
	}
	if strings.ContainsFunc(cfg.MetricsToken, unicode.IsSpace) {
		bad("METRICS_TOKEN", "want a token without spaces")
	} else if n := utf8.RuneCountInString(cfg.MetricsToken); n > 0 && n < MinAdminTokenLength {
		bad("METRICS_TOKEN", "want at least %d characters, got %d", MinAdminTokenLength, n)
	}
	if !failed["DISPATCH_INTERVAL"] && cfg.DispatchInterval < time.Second {
		bad("DISPATCH_INTERVAL", "want a duration of at least 1s like 1m or 30s, got %q", got("DISPATCH_INTERVAL", cfg.DispatchInterval))
	}
	if !failed["FEED_MAX_LAG"] && cfg.FeedMaxLag < 1 {
		bad("FEED_MAX_LAG", "want a whole number of at least 1, got %q", got("FEED_MAX_LAG", cfg.FeedMaxLag))
	}
	if !failed["FEED_WRITE_TIMEOUT"] && cfg.FeedWriteTimeout < time.Second {
		bad("FEED_WRITE_TIMEOUT", "want a duration of at least 1s, got %q", got("FEED_WRITE_TIMEOUT", cfg.FeedWriteTimeout))
	}
	if !failed["REPLAY_BATCH"] && (cfg.ReplayBatch < 1 || cfg.ReplayBatch > 10000) {
		bad("REPLAY_BATCH", "want a whole number from 1 to 10000, got %q", got("REPLAY_BATCH", cfg.ReplayBatch))
	}
	if strings.ContainsFunc(cfg.AdminToken, unicode.IsSpace) {
		bad("ADMIN_TOKEN", "want a token without spaces")
	} else if n := utf8.RuneCountInString(cfg.AdminToken); n > 0 && n < MinAdminTokenLength {
		// The length only: the value is a secret.
		bad("ADMIN_TOKEN", "want at least %d characters (erp user prints one: erp_ and 43 random characters), got %d", MinAdminTokenLength, n)
	}
	if _, err := httpapi.ParseProxies(cfg.TrustedProxies); err != nil {
		bad("TRUSTED_PROXIES", "%v", err)
	}
	if _, err := wsgorilla.AllowOrigins(cfg.AllowedOrigins); err != nil {
		bad("ALLOWED_ORIGINS", "%v", err)
	}
	if u, err := url.Parse(cfg.DemoURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("DEMO_URL", "want an http(s) URL like http://localhost:8080/graphql, got %q", cfg.DemoURL)
	}
	if cfg.PublicURL != "" {
		if u, err := url.Parse(cfg.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			bad("PUBLIC_URL", "want an absolute http(s) URL without query like https://erp.example.com, got %q", cfg.PublicURL)
		}
	}
	if strings.ContainsFunc(cfg.DemoToken, unicode.IsSpace) {
		bad("DEMO_TOKEN", "want a token without spaces")
	}
	if _, err := LoadTimeZone(cfg.TimeZone); err != nil && !failed["TIME_ZONE"] {
		errs = append(errs, err)
	}
	if !failed["SHUTDOWN_TIMEOUT"] && cfg.ShutdownTimeout < time.Second {
		bad("SHUTDOWN_TIMEOUT", "want a duration of at least 1s like 15s or 1m, got %q", got("SHUTDOWN_TIMEOUT", cfg.ShutdownTimeout))
	}
	if !failed["WEBHOOK_DISABLE_AFTER"] && cfg.WebhookDisableAfter < 0 {
		bad("WEBHOOK_DISABLE_AFTER", "want a duration like 120h (5 days), or 0 for never, got %q", got("WEBHOOK_DISABLE_AFTER", cfg.WebhookDisableAfter))
	}
	if !failed["RETENTION"] && cfg.Retention < time.Hour {
		bad("RETENTION", "want a duration of at least 1h like 168h (7 days), got %q", got("RETENTION", cfg.Retention))
	}
	if !failed["IDEMPOTENCY_TTL"] && cfg.IdempotencyTTL < time.Minute {
		bad("IDEMPOTENCY_TTL", "want a duration of at least 1m like 24h, got %q", got("IDEMPOTENCY_TTL", cfg.IdempotencyTTL))
	}
	switch cfg.LogFormat {
	case "", "json", "text":
	default:
		bad("LOG_FORMAT", "want json or text, got %q", cfg.LogFormat)
	}
	if cmd == "user" {
		// Checked here, before a local PostgreSQL is started for nothing.
		if !slices.Contains(db.Roles, cfg.User.Role) {
			bad("-role", "want one of %s, got %q", strings.Join(db.Roles, ", "), cfg.User.Role)
		}
		for _, src := range cfg.User.SourceList() {
			if src != db.SourceShop && src != db.SourceCRM {
				bad("-sources", "want shop, crm or shop,crm, got %q", cfg.User.Sources)
				break
			}
		}
		switch sources := cfg.User.SourceList(); {
		case cfg.User.Role == db.RoleIntegration && len(sources) == 0:
			bad("-sources", "an integration account needs the sources it receives orders for: shop, crm or shop,crm")
		case cfg.User.Role != db.RoleIntegration && len(sources) > 0:
			bad("-sources", "only an integration account (-role integration) is bound to sources")
		}
		if cfg.User.TokenTTL < 0 {
			bad("-token-ttl", "want a lifetime like 720h, or 0 for a token that never expires, got %s", cfg.User.TokenTTL)
		}
	}
	errs = append(errs, validateNats(cfg)...)
	if cfg.PprofAddr != "" && !loopbackAddr(cfg.PprofAddr) {
		bad("PPROF_ADDR", "want a loopback host:port like 127.0.0.1:6060 or localhost:6060 (profiles must not reach the network), got %q", cfg.PprofAddr)
	}
	return errs
}

// validateNats checks NATS_URL and its companions here, with the other
// settings, so that a bad one stops the server before anything starts;
// whether NATS is reachable is not checked (the server starts without it).
func validateNats(cfg Config) []error {
	var errs []error
	bad := func(setting, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{setting}, args...)...))
	}
	files := []struct{ env, path string }{{"NATS_CREDS", cfg.NatsCreds}, {"NATS_NKEY_SEED", cfg.NatsNKey}, {"NATS_CA", cfg.NatsCA}}
	if cfg.NatsURL == "" {
		for _, f := range files {
			if f.path != "" {
				bad(f.env, "needs NATS_URL: without it the server has no NATS")
			}
		}
		return errs
	}
	for _, raw := range strings.Split(cfg.NatsURL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
			// The text may hold a password: not quoted.
			bad("NATS_URL", "want nats://, tls://, ws:// or wss:// URLs like nats://localhost:4222, comma-separated for a cluster")
			break
		}
	}
	if cfg.NatsCreds != "" && cfg.NatsNKey != "" {
		bad("NATS_NKEY_SEED", "give NATS_CREDS or NATS_NKEY_SEED, not both")
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		switch {
		case err != nil:
			bad(f.env, "%v", err)
		case f.env == "NATS_CA":
			if !x509.NewCertPool().AppendCertsFromPEM(b) {
				bad(f.env, "want a PEM file of CA certificates, got none in %s", f.path)
			}
		default: // a seed file, or a credentials file holding one
			if _, err := nkeys.ParseDecoratedNKey(b); err != nil {
				bad(f.env, "want a file holding an NKey seed (SU…), got none in %s: %v", f.path, err)
			}
		}
	}
	return errs
}

// setting is one environment-backed field of Config.
type setting struct {
	name, env, flag, def, help, want string
	secret                           bool
}

// settings lists Config's env-tagged fields in order; each one's flag is
// its variable in lower case with dashes (DISPATCH_INTERVAL:
// -dispatch-interval).
func settings() []setting {
	t := reflect.TypeFor[Config]()
	var out []setting
	for i := range t.NumField() {
		sf := t.Field(i)
		key := sf.Tag.Get("env")
		if key == "" {
			continue
		}
		out = append(out, setting{
			name:   sf.Name,
			env:    key,
			flag:   strings.ToLower(strings.ReplaceAll(key, "_", "-")),
			def:    sf.Tag.Get("envDefault"),
			help:   sf.Tag.Get("help"),
			want:   sf.Tag.Get("want"),
			secret: sf.Tag.Get("secret") == "true",
		})
	}
	return out
}

func fieldNamed(fields []setting, name string) (setting, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return setting{}, false
}

// registerFlagsOnly registers a flag for every flag-tagged field of the
// struct v points to (string and time.Duration fields).
func registerFlagsOnly(fs *flag.FlagSet, v any) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		sf := rv.Type().Field(i)
		name := sf.Tag.Get("flag")
		if name == "" {
			continue
		}
		help := strings.ReplaceAll(sf.Tag.Get("help"), "{roles}", strings.Join(db.Roles, ", "))
		def := sf.Tag.Get("default")
		switch p := rv.Field(i).Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, name, def, help)
		case *time.Duration:
			d, _ := time.ParseDuration(cmp.Or(def, "0s"))
			fs.DurationVar(p, name, d, help)
		default:
			panic(fmt.Sprintf("config: flag -%s: unsupported type %T", name, p))
		}
	}
}

// trimmed drops the spaces around each item and the empty ones.
func trimmed(items []string) []string {
	var out []string
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// validPort reports a TCP port number, 0 (any free port) included.
func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// loopbackAddr reports a host:port whose host is localhost or a loopback
// IP: an empty host would listen on every interface.
func loopbackAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !validPort(port) {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoadTimeZone resolves an IANA zone name for TIME_ZONE. "Local" is
// refused: the browser formats the times and knows no server-local zone.
// The error starts with TIME_ZONE.
func LoadTimeZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, fmt.Errorf("TIME_ZONE: want an IANA time zone like Europe/Moscow or UTC, got %q", name)
	}
	return loc, nil
}
