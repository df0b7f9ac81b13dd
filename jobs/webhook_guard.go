package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// ErrWebhookAddressRefused is matched (errors.Is) by every refusal of the
// webhook address guard, at create time (CheckWebhookURL) and at dial time
// (WebhookResult.Err of Send, which is then Permanent).
var ErrWebhookAddressRefused = errors.New("webhook address refused")

// WebhookAddressError is the guard's refusal of one address: Host is the
// URL's host as written (a name or a literal IP), Addr the address it is or
// resolves to, Kind what that address is ("loopback", "private",
// "link-local", "multicast", "unspecified", "cloud metadata", "reserved").
type WebhookAddressError struct {
	Host string
	Addr netip.Addr
	Kind string
}

func (e *WebhookAddressError) Error() string {
	kind := "a " + e.Kind
	if strings.IndexAny(e.Kind, "aeiou") == 0 {
		kind = "an " + e.Kind
	}
	subject := fmt.Sprintf("%s resolves to %s, %s address", e.Host, e.Addr, kind)
	if strings.EqualFold(e.Host, e.Addr.String()) || strings.EqualFold(e.Host, e.Addr.WithZone("").String()) {
		subject = fmt.Sprintf("%s is %s address", e.Host, kind)
	}
	// The setting's name is what an operator of an on-premise receiver needs.
	return subject + ": refused unless WEBHOOK_ALLOW_PRIVATE=true"
}

// Is makes errors.Is(err, ErrWebhookAddressRefused) true.
func (e *WebhookAddressError) Is(target error) bool { return target == ErrWebhookAddressRefused }

// WebhookResolver resolves a host name to IP addresses; *net.Resolver
// implements it (network is "ip", "ip4" or "ip6").
type WebhookResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// WebhookDialer opens connections; *net.Dialer implements it. Behind the
// guard it is only ever given "ip:port" addresses that the guard allowed.
type WebhookDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// blockedPrefix is a range of addresses no webhook may reach.
type blockedPrefix struct {
	prefix netip.Prefix
	kind   string
}

// webhookBlocked lists the ranges the guard refuses, most specific first
// (the first match names the kind): everything that is not a globally
// routed unicast address, and the cloud metadata endpoints, some of which
// sit inside otherwise public ranges. Ranges that embed an IPv4 address
// are either refused here as a whole (IPv4-compatible ::/96, local-use
// NAT64 64:ff9b:1::/48 whose embedding the local network chooses, Teredo
// inside 2001::/23) or checked on the address they embed (see
// webhookEmbedding and webhookAddrKind).
var webhookBlocked = func() []blockedPrefix {
	list := []struct{ cidr, kind string }{
		// Cloud metadata endpoints.
		{"169.254.169.254/32", "cloud metadata"}, // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
		{"169.254.170.2/32", "cloud metadata"},   // AWS ECS task metadata
		{"fd00:ec2::254/128", "cloud metadata"},  // AWS IMDS over IPv6
		{"100.100.100.200/32", "cloud metadata"}, // Alibaba Cloud
		{"168.63.129.16/32", "cloud metadata"},   // Azure wire server (a public address)
		{"192.0.0.192/32", "cloud metadata"},     // Oracle Cloud
		{"fd20:ce::254/128", "cloud metadata"},   // GCP metadata over IPv6
		{"0.0.0.0/32", "unspecified"},            //
		{"::/128", "unspecified"},                //
		{"127.0.0.0/8", "loopback"},              //
		{"::1/128", "loopback"},                  //
		{"10.0.0.0/8", "private"},                // RFC 1918
		{"172.16.0.0/12", "private"},             // RFC 1918
		{"192.168.0.0/16", "private"},            // RFC 1918
		{"100.64.0.0/10", "private"},             // shared address space (carrier-grade NAT)
		{"fc00::/7", "private"},                  // unique local addresses
		{"fec0::/10", "private"},                 // site-local (deprecated, still routed inside sites)
		{"169.254.0.0/16", "link-local"},         //
		{"fe80::/10", "link-local"},              //
		{"224.0.0.0/4", "multicast"},             //
		{"ff00::/8", "multicast"},                //
		{"255.255.255.255/32", "reserved"},       // broadcast
		{"0.0.0.0/8", "reserved"},                // "this network"
		{"192.0.0.0/24", "reserved"},             // IETF protocol assignments
		{"192.0.2.0/24", "reserved"},             // documentation
		{"198.18.0.0/15", "reserved"},            // benchmarking
		{"198.51.100.0/24", "reserved"},          // documentation
		{"203.0.113.0/24", "reserved"},           // documentation
		{"240.0.0.0/4", "reserved"},              // future use
		{"::/96", "reserved"},                    // IPv4-compatible (deprecated)
		{"64:ff9b:1::/48", "private"},            // local-use NAT64
		{"100::/64", "reserved"},                 // discard-only
		{"2001::/23", "reserved"},                // IETF protocol assignments, Teredo
		{"2001:db8::/32", "reserved"},            // documentation
		{"3fff::/20", "reserved"},                // documentation
		{"5f00::/16", "reserved"},                // segment routing SIDs
	}
	out := make([]blockedPrefix, len(list))
	for i, b := range list {
		out[i] = blockedPrefix{prefix: netip.MustParsePrefix(b.cidr), kind: b.kind}
	}
	return out
}()

// webhookEmbedding lists the ranges whose addresses carry an IPv4 address
// at byte offset at, which a translator or a tunnel relay connects to on
// the webhook's behalf: that address is checked by the same rules. The
// IPv4-mapped ::ffff:0:0/96 is unmapped before anything else.
var webhookEmbedding = []struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},    // NAT64, well-known prefix (RFC 6052)
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12}, // IPv4-translated, SIIT (RFC 2765)
	{netip.MustParsePrefix("2002::/16"), 2},        // 6to4 (RFC 3056)
}

// webhookAddrKind returns what addr is when the guard refuses it ("" when it
// is allowed).
func webhookAddrKind(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	if !addr.IsValid() {
		return "reserved"
	}
	for _, b := range webhookBlocked {
		if b.prefix.Contains(addr) {
			return b.kind
		}
	}
	for _, e := range webhookEmbedding {
		if e.prefix.Contains(addr) {
			a := addr.As16()
			return webhookAddrKind(netip.AddrFrom4([4]byte(a[e.at : e.at+4])))
		}
	}
	return ""
}

// webhookGuard refuses connections to addresses that are not public, unless
// allowPrivate. The zero value guards with the system's resolver and dialer.
type webhookGuard struct {
	allowPrivate bool
	resolver     WebhookResolver
	dialer       WebhookDialer
}

func (g *webhookGuard) lookup() WebhookResolver {
	if g.resolver == nil {
		return net.DefaultResolver
	}
	return g.resolver
}

// addrs returns the addresses of host (a literal IP or a name), each
// checked: a name any of whose addresses is refused is refused as a whole,
// so that which address a client happens to pick cannot matter.
func (g *webhookGuard) addrs(ctx context.Context, host string) ([]netip.Addr, error) {
	if addr, err := netip.ParseAddr(host); err == nil {
		if kind := webhookAddrKind(addr); kind != "" {
			return nil, &WebhookAddressError{Host: host, Addr: addr, Kind: kind}
		}
		return []netip.Addr{addr}, nil
	}
	// RFC 6761: these names are loopback whatever a resolver says; no query
	// is made for them.
	if name := strings.ToLower(strings.TrimSuffix(host, ".")); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return nil, &WebhookAddressError{Host: host, Addr: netip.IPv6Loopback(), Kind: "loopback"}
	}
	found, err := g.lookup().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	for _, addr := range found {
		if kind := webhookAddrKind(addr); kind != "" {
			return nil, &WebhookAddressError{Host: host, Addr: addr.Unmap(), Kind: kind}
		}
	}
	return found, nil
}

// checkURL is CheckWebhookURL with g's resolver; nil when g.allowPrivate.
func (g *webhookGuard) checkURL(ctx context.Context, rawURL string) error {
	if err := ValidateWebhookURL(rawURL); err != nil {
		return err
	}
	if g.allowPrivate {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil { // unreachable: ValidateWebhookURL parsed it
		return fmt.Errorf("webhook url is invalid: %w", err)
	}
	host := u.Hostname()
	if _, err := g.addrs(ctx, host); err != nil {
		if errors.Is(err, ErrWebhookAddressRefused) {
			return fmt.Errorf("webhook url host %w", err)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return fmt.Errorf("webhook url host %s does not resolve: %s", host, dnsErr.Err)
		}
		return fmt.Errorf("webhook url host %s does not resolve: %w", host, err)
	}
	return nil
}

// dialContext resolves address's host itself, refuses it if any of its
// addresses is refused, and connects to the checked addresses only (in the
// resolver's order, the next after a failure): what is checked is what is
// connected to, so a name that resolves differently the second time (DNS
// rebinding) gains nothing.
func (g *webhookGuard) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("webhook dial %s: %w", address, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("webhook dial %s: port %q is not a number", address, portText)
	}
	addrs, err := g.addrs(ctx, host)
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, addr := range addrs {
		conn, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(addr.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// control is the default dialer's net.Dialer.Control: it checks the address
// of the socket being connected once more, the last point before a packet
// leaves, whatever path led there.
func (g *webhookGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial %s: %w", address, err)
	}
	if kind := webhookAddrKind(ap.Addr()); kind != "" {
		return &WebhookAddressError{Host: ap.Addr().String(), Addr: ap.Addr(), Kind: kind}
	}
	return nil
}

// CheckWebhookURL reports whether rawURL may be a webhook endpoint: it must
// pass ValidateWebhookURL, and its host must be a public address or a name
// all of whose addresses (resolved now, with the system resolver) are
// public. Refused: loopback, private (RFC 1918, carrier-grade NAT, fc00::/7),
// link-local (169.254.0.0/16, fe80::/10), multicast, unspecified, reserved
// and cloud metadata addresses (169.254.169.254, fd00:ec2::254,
// 100.100.100.200, …); the error then matches ErrWebhookAddressRefused. A
// name that does not resolve is an error too. Call it when a webhook's URL
// is created or changed, unless private addresses are allowed; a sender
// checks again at every connection (see WithAllowPrivate).
func CheckWebhookURL(ctx context.Context, rawURL string) error {
	return (&webhookGuard{}).checkURL(ctx, rawURL)
}

// NormalizeWebhookURL returns rawURL as a webhook's URL is stored and sent:
// parsed and serialised again, with every byte of the query that may not
// appear raw in a URL (non-ASCII, quotes, angle brackets, …)
// percent-encoded, as url.URL.String already does for the path. A URL that
// ValidateWebhookURL refuses, raw spaces included, is an error: a space
// could be encoded as %20 or + depending on the receiver, so its owner
// writes it encoded.
func NormalizeWebhookURL(rawURL string) (string, error) {
	if err := ValidateWebhookURL(rawURL); err != nil {
		return "", err
	}
	u, err := url.Parse(rawURL)
	if err != nil { // unreachable: ValidateWebhookURL parsed it
		return "", fmt.Errorf("webhook url is invalid: %w", err)
	}
	return normalURL(*u), nil
}

// normalURL writes u as NormalizeWebhookURL does.
func normalURL(u url.URL) string {
	u.RawQuery = escapeQuery(u.RawQuery)
	return u.String()
}

// escapeQuery percent-encodes the bytes of a raw query that RFC 3986 does
// not allow there; '%' stays, so what is already encoded stays as it is.
func escapeQuery(q string) string {
	const allowed = "-._~!$&'()*+,;=:@/?%"
	var b strings.Builder
	for i := range len(q) {
		c := q[i]
		if c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(allowed, c) >= 0) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
