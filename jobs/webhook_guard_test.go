package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"erp/db"
)

// No test here sends a packet anywhere but loopback: names resolve through
// stubResolver, and connections to any address outside loopback go to
// stubDialer, which never opens one.

// stubResolver resolves names from a table; a name it does not know is not
// found. answer, when set, decides instead (call counts from 1).
type stubResolver struct {
	names  map[string][]string
	answer func(call int, host string) []string
	calls  atomic.Int32
}

func (r *stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	call := int(r.calls.Add(1))
	var found []string
	var ok bool
	if r.answer != nil {
		found, ok = r.answer(call, host), true
	} else {
		found, ok = r.names[host]
	}
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(found))
	for i, a := range found {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

// noResolver fails the test when asked: literal addresses and refused
// names must be decided without resolving.
type noResolver struct{ t *testing.T }

func (r noResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.t.Errorf("resolver asked for %q", host)
	return nil, errors.New("no resolver")
}

// stubDialer records the addresses it is asked for. It connects only to
// loopback, through a real net.Dialer, and only when loopback is set;
// anything else fails without a packet.
type stubDialer struct {
	loopback bool
	mu       sync.Mutex
	dialed   []string
}

func (d *stubDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().IsLoopback() && d.loopback {
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("stub dialer opens no connection")}
}

func (d *stubDialer) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// withArticle is kind after its indefinite article, as the errors say it.
func withArticle(kind string) string {
	if kind == "unspecified" {
		return "an " + kind
	}
	return "a " + kind
}

// refusedCases are addresses the guard refuses, with their kind.
var refusedCases = []struct{ host, kind string }{
	{"127.0.0.1", "loopback"},
	{"127.1.2.3", "loopback"},
	{"::1", "loopback"},
	{"::ffff:127.0.0.1", "loopback"}, // IPv4-mapped
	{"2002:7f00:1::", "loopback"},    // 6to4 of 127.0.0.1
	{"0.0.0.0", "unspecified"},
	{"::", "unspecified"},
	{"10.0.0.1", "private"},
	{"172.16.0.1", "private"},
	{"172.31.255.255", "private"},
	{"192.168.1.1", "private"},
	{"100.64.0.1", "private"},
	{"fd12:3456::1", "private"},
	{"::ffff:10.0.0.1", "private"},
	{"169.254.169.254", "cloud metadata"},
	{"::ffff:169.254.169.254", "cloud metadata"},
	{"64:ff9b::a9fe:a9fe", "cloud metadata"}, // NAT64 of 169.254.169.254
	{"fd00:ec2::254", "cloud metadata"},
	{"100.100.100.200", "cloud metadata"},
	{"168.63.129.16", "cloud metadata"},
	{"192.0.0.192", "cloud metadata"},
	{"169.254.1.1", "link-local"},
	{"fe80::1", "link-local"},
	{"fe80::1%eth0", "link-local"},
	{"224.0.0.1", "multicast"},
	{"239.255.255.250", "multicast"},
	{"ff02::1", "multicast"},
	{"255.255.255.255", "reserved"},
	{"240.0.0.1", "reserved"},
	{"198.18.0.1", "reserved"},
	{"2001:db8::1", "reserved"},
	// Ranges that embed an IPv4 address: the address inside is checked.
	{"::ffff:0:7f00:1", "loopback"},          // IPv4-translated (SIIT) 127.0.0.1
	{"::ffff:0:a00:1", "private"},            // IPv4-translated 10.0.0.1
	{"::ffff:0:a9fe:a9fe", "cloud metadata"}, // IPv4-translated 169.254.169.254
	{"::ffff:0:0:0", "unspecified"},          // IPv4-translated 0.0.0.0
	{"::ffff:0:ffff:ffff", "reserved"},       // IPv4-translated broadcast
	{"64:ff9b::7f00:1", "loopback"},          // NAT64 of 127.0.0.1
	{"64:ff9b::c0a8:101", "private"},         // NAT64 of 192.168.1.1
	{"2002:a00:1::", "private"},              // 6to4 of 10.0.0.1
	{"2002:a9fe:a9fe::", "cloud metadata"},   // 6to4 of 169.254.169.254
	// Refused whatever they embed: the local network chooses a local-use
	// NAT64 prefix's layout; Teredo sits in the reserved 2001::/23.
	{"64:ff9b:1::808:808", "private"},                    // local-use NAT64, 8.8.8.8 at /96
	{"64:ff9b:1:7f00:1::", "private"},                    // local-use NAT64, 127.0.0.1 at /48
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved"}, // Teredo, public server and client (RFC 4380's example)
	{"2001:0:808:808::80ff:fffe", "reserved"},            // Teredo, client 127.0.0.1 (obfuscated)
	{"2001:0:7f00:1:8000:63bf:3fff:fdd2", "reserved"},    // Teredo, server 127.0.0.1
}

// allowedCases are public addresses (never dialled by these tests).
var allowedCases = []string{
	"8.8.8.8", "1.1.1.1", "11.0.0.1", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111",
	"::ffff:8.8.8.8",   // IPv4-mapped
	"::ffff:0:808:808", // IPv4-translated
	"64:ff9b::808:808", // NAT64
	"2002:808:808::",   // 6to4
}

func hostURL(host string) string {
	if strings.Contains(host, ":") {
		return "http://[" + strings.ReplaceAll(host, "%", "%25") + "]/hook"
	}
	return "http://" + host + "/hook"
}

func TestSSRFCheckWebhookURLLiterals(t *testing.T) {
	t.Parallel()
	s := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(noResolver{t}))
	for _, tt := range refusedCases {
		err := s.CheckURL(t.Context(), hostURL(tt.host))
		require.ErrorIs(t, err, ErrWebhookAddressRefused, tt.host)
		var refused *WebhookAddressError
		require.ErrorAs(t, err, &refused, tt.host)
		require.Equal(t, tt.kind, refused.Kind, tt.host)
		require.Equal(t, fmt.Sprintf("webhook url host %s is %s address: refused unless WEBHOOK_ALLOW_PRIVATE=true", tt.host, withArticle(tt.kind)), err.Error())
		// The package function, with the system resolver, decides literals alike.
		require.ErrorIs(t, CheckWebhookURL(t.Context(), hostURL(tt.host)), ErrWebhookAddressRefused, tt.host)
	}
	for _, host := range allowedCases {
		require.NoError(t, s.CheckURL(t.Context(), hostURL(host)), host)
		require.NoError(t, CheckWebhookURL(t.Context(), hostURL(host)), host)
	}
	for _, raw := range []string{"http://127.0.0.1:8080/", "http://[::1]:8443/x?y=1", "https://169.254.169.254/latest/meta-data/"} {
		require.ErrorIs(t, s.CheckURL(t.Context(), raw), ErrWebhookAddressRefused, raw)
	}
}

func TestSSRFCheckWebhookURLNames(t *testing.T) {
	t.Parallel()
	r := &stubResolver{names: map[string][]string{
		"loopback.test": {"127.0.0.1"},
		"private.test":  {"10.0.0.1"},
		"meta.test":     {"169.254.169.254"},
		"mapped.test":   {"::ffff:192.168.0.10"},
		"mixed.test":    {"8.8.8.8", "192.168.1.1"}, // any refused address refuses the name
		"v6.test":       {"2606:4700:4700::1111", "fe80::1"},
		"public.test":   {"8.8.8.8", "2606:4700:4700::1111"},
		"empty.test":    {},
	}}
	s := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r))
	refused := []struct{ url, want string }{
		{"http://loopback.test/", "webhook url host loopback.test resolves to 127.0.0.1, a loopback address: refused unless WEBHOOK_ALLOW_PRIVATE=true"},
		{"https://private.test:8443/x", "webhook url host private.test resolves to 10.0.0.1, a private address"},
		{"http://meta.test/", "resolves to 169.254.169.254, a cloud metadata address"},
		{"http://mapped.test/", "resolves to 192.168.0.10, a private address"},
		{"http://mixed.test/", "resolves to 192.168.1.1, a private address"},
		{"http://v6.test/", "resolves to fe80::1, a link-local address"},
	}
	for _, tt := range refused {
		err := s.CheckURL(t.Context(), tt.url)
		require.ErrorIs(t, err, ErrWebhookAddressRefused, tt.url)
		require.ErrorContains(t, err, tt.want)
	}
	require.NoError(t, s.CheckURL(t.Context(), "https://public.test/hook"))
	require.EqualError(t, s.CheckURL(t.Context(), "https://missing.test/hook"), "webhook url host missing.test does not resolve: no such host")
	require.EqualError(t, s.CheckURL(t.Context(), "https://empty.test/hook"), "webhook url host empty.test does not resolve: no addresses")

	// RFC 6761 localhost names are refused without asking any resolver.
	calls := r.calls.Load()
	for _, raw := range []string{"http://localhost/", "http://LocalHost.:8080/", "http://api.localhost/"} {
		err := s.CheckURL(t.Context(), raw)
		require.ErrorIs(t, err, ErrWebhookAddressRefused, raw)
		require.ErrorContains(t, err, "a loopback address")
		require.ErrorIs(t, CheckWebhookURL(t.Context(), raw), ErrWebhookAddressRefused, raw)
	}
	require.Equal(t, calls, r.calls.Load())

	// An invalid URL is reported as ValidateWebhookURL does, unresolved.
	require.EqualError(t, s.CheckURL(t.Context(), "ftp://public.test/"), `webhook url scheme "ftp" is not allowed: only http and https`)
	require.EqualError(t, CheckWebhookURL(t.Context(), ""), "webhook url is empty")
	require.Equal(t, calls, r.calls.Load())
}

func TestSSRFAllowPrivateChecksOnlyTheURLShape(t *testing.T) {
	t.Parallel()
	for _, s := range []*WebhookSender{NewWebhookSender(WithAllowPrivate(true), WithWebhookResolver(noResolver{t})), NewWebhookSender(WithWebhookResolver(noResolver{t}))} {
		for _, tt := range refusedCases {
			require.NoError(t, s.CheckURL(t.Context(), hostURL(tt.host)), tt.host)
		}
		require.NoError(t, s.CheckURL(t.Context(), "http://loopback.test/"))
		require.NoError(t, s.CheckURL(t.Context(), "http://nonexistent.invalid/x"), "not resolved: its deliveries fail instead")
		require.ErrorContains(t, s.CheckURL(t.Context(), "http://user:pw@10.0.0.1/"), "must not contain credentials")
	}
	require.EqualError(t, (*WebhookSender)(nil).CheckURL(t.Context(), "http://x/"), "webhook sender not created by NewWebhookSender")
}

// TestSSRFDialRefusesLoopback sends to a real receiver on loopback: a
// guarded sender refuses it at dial time (the URL was never checked), one
// that allows private addresses delivers.
func TestSSRFDialRefusesLoopback(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	port := rec.srv.Listener.Addr().(*net.TCPAddr).Port
	r := &stubResolver{names: map[string][]string{"hooks.test": {"127.0.0.1"}}}
	dialer := &stubDialer{loopback: true}
	guarded := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r), WithWebhookDialer(dialer))

	for _, tt := range []struct{ url, want string }{
		{rec.srv.URL, fmt.Sprintf("webhook 127.0.0.1:%d: 127.0.0.1 is a loopback address: refused unless WEBHOOK_ALLOW_PRIVATE=true", port)},
		{fmt.Sprintf("http://[::1]:%d/", port), fmt.Sprintf("webhook [::1]:%d: ::1 is a loopback address", port)},
		{fmt.Sprintf("http://hooks.test:%d/", port), fmt.Sprintf("webhook hooks.test:%d: hooks.test resolves to 127.0.0.1, a loopback address", port)},
		{fmt.Sprintf("http://localhost:%d/", port), fmt.Sprintf("webhook localhost:%d: localhost resolves to ::1, a loopback address", port)},
	} {
		res := guarded.Send(t.Context(), WebhookConfig{URL: tt.url}, 1, []byte(`{}`))
		require.ErrorIs(t, res.Err, ErrWebhookAddressRefused, tt.url)
		require.ErrorContains(t, res.Err, tt.want)
		require.True(t, res.Permanent, "a refused address stays refused")
		require.Zero(t, res.Status)
	}
	require.Empty(t, rec.received(), "no request reached the receiver")
	require.Empty(t, dialer.addresses(), "no connection was attempted")

	// Allowed: the same receiver gets the request, through the same dialer.
	allowed := NewWebhookSender(WithAllowPrivate(true), WithWebhookResolver(r), WithWebhookDialer(dialer))
	res := allowed.Send(t.Context(), WebhookConfig{URL: rec.srv.URL}, 1, []byte(`{}`))
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, []string{rec.host()}, dialer.addresses())
	// So does a sender with no option at all, with the system dialer.
	res = NewWebhookSender().Send(t.Context(), WebhookConfig{URL: rec.srv.URL}, 2, []byte(`{}`))
	require.NoError(t, res.Err)
	require.Len(t, rec.received(), 2)
}

// TestSSRFDialRebinding: a name that resolves to a public address when the
// URL is checked and to loopback when the sender connects is refused.
func TestSSRFDialRebinding(t *testing.T) {
	t.Parallel()
	rec := newWebhookReceiver(t, acceptWebhook)
	port := rec.srv.Listener.Addr().(*net.TCPAddr).Port
	r := &stubResolver{answer: func(call int, _ string) []string {
		if call == 1 {
			return []string{"8.8.8.8"}
		}
		return []string{"127.0.0.1"}
	}}
	dialer := &stubDialer{loopback: true}
	s := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r), WithWebhookDialer(dialer))
	raw := fmt.Sprintf("http://rebind.test:%d/", port)
	require.NoError(t, s.CheckURL(t.Context(), raw), "public when created")
	res := s.Send(t.Context(), WebhookConfig{URL: raw}, 1, []byte(`{}`))
	require.ErrorIs(t, res.Err, ErrWebhookAddressRefused)
	require.ErrorContains(t, res.Err, "rebind.test resolves to 127.0.0.1, a loopback address")
	require.True(t, res.Permanent)
	require.Empty(t, rec.received())
	require.Empty(t, dialer.addresses())
}

// TestSSRFDialRefusesPrivateAddresses: private, link-local, multicast and
// metadata addresses, as literals and behind names, never reach the dialer.
func TestSSRFDialRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	for _, tt := range refusedCases {
		r := &stubResolver{names: map[string][]string{"internal.test": {tt.host}}}
		dialer := &stubDialer{}
		s := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r), WithWebhookDialer(dialer))
		for _, raw := range []string{hostURL(tt.host), "http://internal.test/hook", "https://internal.test:8443/hook"} {
			res := s.Send(t.Context(), WebhookConfig{URL: raw, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 1, []byte(`{}`))
			require.ErrorIs(t, res.Err, ErrWebhookAddressRefused, raw)
			require.ErrorContains(t, res.Err, withArticle(tt.kind)+" address", raw)
			require.True(t, res.Permanent, raw)
		}
		require.Empty(t, dialer.addresses(), tt.host)
	}
}

// TestSSRFDialConnectsToTheCheckedAddress: a public name is dialled by the
// addresses the guard checked, in order, not by name; the stub dialer fails
// them (no packet), which is a transient failure.
func TestSSRFDialConnectsToTheCheckedAddress(t *testing.T) {
	t.Parallel()
	r := &stubResolver{names: map[string][]string{"public.test": {"8.8.8.8", "2606:4700:4700::1111"}}}
	dialer := &stubDialer{}
	s := NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r), WithWebhookDialer(dialer))
	res := s.Send(t.Context(), WebhookConfig{URL: "https://public.test/hook"}, 1, []byte(`{}`))
	require.EqualError(t, res.Err, "webhook public.test unreachable: stub dialer opens no connection")
	require.False(t, res.Permanent)
	require.NotErrorIs(t, res.Err, ErrWebhookAddressRefused)
	require.Equal(t, []string{"8.8.8.8:443", "[2606:4700:4700::1111]:443"}, dialer.addresses())

	dialer2 := &stubDialer{}
	res = NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r), WithWebhookDialer(dialer2)).
		Send(t.Context(), WebhookConfig{URL: "http://[2606:4700:4700::1111]:8080/hook"}, 1, []byte(`{}`))
	require.ErrorContains(t, res.Err, "unreachable")
	require.Equal(t, []string{"[2606:4700:4700::1111]:8080"}, dialer2.addresses())
}

// TestSSRFDialerControl: the system dialer of a guarded sender checks the
// socket's address once more before connecting, and the guarded sender uses
// no proxy (the proxy would choose the address).
func TestSSRFDialerControl(t *testing.T) {
	t.Parallel()
	guarded := NewWebhookSender(WithAllowPrivate(false))
	nd, ok := guarded.guard.dialer.(*net.Dialer)
	require.True(t, ok)
	require.NotNil(t, nd.Control)
	for _, tt := range []struct{ address, kind string }{
		{"127.0.0.1:80", "loopback"}, {"[::1]:443", "loopback"}, {"169.254.169.254:80", "cloud metadata"},
		{"10.1.2.3:8080", "private"}, {"[fe80::1%eth0]:80", "link-local"}, {"[::ffff:127.0.0.1]:80", "loopback"},
	} {
		err := nd.Control("tcp", tt.address, nil)
		require.ErrorIs(t, err, ErrWebhookAddressRefused, tt.address)
		require.ErrorContains(t, err, withArticle(tt.kind)+" address", tt.address)
	}
	require.NoError(t, nd.Control("tcp4", "8.8.8.8:443", nil))
	require.NoError(t, nd.Control("tcp6", "[2606:4700:4700::1111]:443", nil))
	require.ErrorContains(t, nd.Control("tcp", "not an address", nil), "webhook dial not an address")

	tr, ok := guarded.client.Transport.(*http.Transport)
	require.True(t, ok)
	require.Nil(t, tr.Proxy, "behind the guard, no proxy")

	open := NewWebhookSender(WithAllowPrivate(true))
	nd, ok = open.guard.dialer.(*net.Dialer)
	require.True(t, ok)
	require.Nil(t, nd.Control)
	tr, ok = open.client.Transport.(*http.Transport)
	require.True(t, ok)
	require.NotNil(t, tr.Proxy)
	u, err := url.Parse("http://example.com/")
	require.NoError(t, err)
	_, err = tr.Proxy(&http.Request{URL: u})
	require.NoError(t, err)
}

func TestSSRFWebhookAddrKind(t *testing.T) {
	t.Parallel()
	for _, tt := range refusedCases {
		require.Equal(t, tt.kind, webhookAddrKind(netip.MustParseAddr(tt.host)), tt.host)
	}
	for _, host := range allowedCases {
		require.Empty(t, webhookAddrKind(netip.MustParseAddr(host)), host)
	}
	require.Equal(t, "reserved", webhookAddrKind(netip.Addr{}))
}

// A webhook's other fields are checked before its URL is resolved: an
// address that does not resolve (a typo, a receiver not set up yet) does
// not hide a mistake in the filter or the format, and no lookup is made
// for input that is refused anyway.
func TestWebhookInputIsCheckedBeforeItsURLResolves(t *testing.T) {
	t.Parallel()
	r := &stubResolver{names: map[string][]string{}}
	d := NewDispatcher(nil, DispatcherConfig{Webhooks: NewWebhookSender(WithAllowPrivate(false), WithWebhookResolver(r))})
	hook, name := "https://receiver.example/hook", "mes"
	bad := []struct {
		in    db.WebhookSubscriberInput
		field string
	}{
		{db.WebhookSubscriberInput{Name: &name, URL: &hook, EventTypes: []string{"doc.nope"}}, "eventTypes"},
		{db.WebhookSubscriberInput{Name: &name, URL: &hook, Condition: new("payload.no ==")}, "condition"},
		{db.WebhookSubscriberInput{Name: &name, URL: &hook, Format: new("xml")}, "format"},
	}
	for _, tt := range bad {
		_, err := d.CreateWebhookSubscriber(t.Context(), nil, tt.in)
		var ie *db.InputError
		require.ErrorAs(t, err, &ie, tt.field)
		require.True(t, strings.HasPrefix(ie.Field, tt.field), "field %q: %v", ie.Field, err)
	}
	require.Zero(t, r.calls.Load(), "lookups for refused input")

	_, err := d.CreateWebhookSubscriber(t.Context(), nil, db.WebhookSubscriberInput{Name: &name, URL: &hook})
	var ie *db.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "url", ie.Field)
	require.ErrorContains(t, err, "does not resolve")
}

func TestNormalizeWebhookURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"https://receiver.example/hook", "https://receiver.example/hook"},
		{"HTTPS://receiver.example:8443/hook?a=1&b=2", "https://receiver.example:8443/hook?a=1&b=2"},
		{"https://receiver.example/хуки/erp", "https://receiver.example/%D1%85%D1%83%D0%BA%D0%B8/erp"},
		{"https://receiver.example/hook?q=путь&x=\"<>\"", "https://receiver.example/hook?q=%D0%BF%D1%83%D1%82%D1%8C&x=%22%3C%3E%22"},
		{"https://receiver.example/a%20b?q=a%20b+c", "https://receiver.example/a%20b?q=a%20b+c"}, // encoded stays as written
		{"https://receiver.example/a%2Fb", "https://receiver.example/a%2Fb"},
		{"http://[2606:4700:4700::1111]:8080/", "http://[2606:4700:4700::1111]:8080/"},
	} {
		got, err := NormalizeWebhookURL(tt.raw)
		require.NoError(t, err, tt.raw)
		require.Equal(t, tt.want, got, tt.raw)
		again, err := NormalizeWebhookURL(got)
		require.NoError(t, err, got)
		require.Equal(t, got, again, "normalising twice changes nothing")
	}
	for _, raw := range []string{
		"https://receiver.example/a b", "https://receiver.example/hook?q=a b", "https://receiver.example/hook#a b",
		" https://receiver.example/hook", "https://receiver.example/hook ", "https://receiver.example/a\u00a0b", "https://receiver.example/a\tb",
	} {
		_, err := NormalizeWebhookURL(raw)
		require.EqualError(t, err, "webhook url contains whitespace: write a space percent-encoded (%20)", "%q", raw)
		require.EqualError(t, CheckWebhookURL(t.Context(), raw), err.Error(), "%q", raw)
	}
	_, err := NormalizeWebhookURL("ftp://receiver.example/")
	require.EqualError(t, err, `webhook url scheme "ftp" is not allowed: only http and https`)
}

// A webhook's URL goes to the database normalised; one with a raw space is
// refused on "url", and a stored one (written before this rule) is not sent.
func TestWebhookURLIsStoredNormalised(t *testing.T) {
	t.Parallel()
	sender := NewWebhookSender(WithAllowPrivate(true), WithWebhookResolver(noResolver{t}))
	d := NewDispatcher(nil, DispatcherConfig{Webhooks: sender})
	hook := "HTTP://receiver.example/хук?q=путь"
	in := db.WebhookSubscriberInput{URL: &hook}
	require.NoError(t, d.checkWebhookInput(t.Context(), &in))
	require.Equal(t, "http://receiver.example/%D1%85%D1%83%D0%BA?q=%D0%BF%D1%83%D1%82%D1%8C", *in.URL)

	spaced, name := "http://receiver.example/a b", "mes"
	_, err := d.CreateWebhookSubscriber(t.Context(), nil, db.WebhookSubscriberInput{Name: &name, URL: &spaced})
	var ie *db.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "url", ie.Field)
	_, err = d.UpdateWebhookSubscriber(t.Context(), nil, 1, db.WebhookSubscriberInput{URL: &spaced})
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "url", ie.Field)

	dialer := &stubDialer{}
	res := NewWebhookSender(WithAllowPrivate(true), WithWebhookDialer(dialer)).Send(t.Context(), WebhookConfig{URL: "http://127.0.0.1:1/hook?q=a b"}, 1, []byte(`{}`))
	require.EqualError(t, res.Err, "webhook url contains whitespace: write a space percent-encoded (%20)")
	require.True(t, res.Permanent)
	require.Empty(t, dialer.addresses())
}
