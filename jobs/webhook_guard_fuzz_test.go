package jobs

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// publicAddr is the fuzz targets' own notion of a public address, from
// net/netip's classification, independent of webhookBlocked: not
// loopback, private, link-local, multicast or unspecified, neither itself
// nor the IPv4 address it embeds (IPv4-mapped, IPv4-translated, NAT64,
// 6to4).
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	if a.Is4() {
		return !netip.MustParsePrefix("100.64.0.0/10").Contains(a) && !netip.MustParsePrefix("0.0.0.0/8").Contains(a)
	}
	b := a.As16()
	for _, e := range []struct {
		prefix string
		at     int
	}{{"64:ff9b::/96", 12}, {"::ffff:0:0:0/96", 12}, {"2002::/16", 2}, {"::/96", 12}} {
		if netip.MustParsePrefix(e.prefix).Contains(a) {
			return publicAddr(netip.AddrFrom4([4]byte(b[e.at : e.at+4])))
		}
	}
	return true
}

// fuzzAddrs reads up to four addresses from raw: 16 bytes each when its
// length is a multiple of 16, else 4.
func fuzzAddrs(raw []byte) []netip.Addr {
	size := 4
	if len(raw) > 0 && len(raw)%16 == 0 {
		size = 16
	}
	var out []netip.Addr
	for i := 0; i+size <= len(raw) && len(out) < 4; i += size {
		a, _ := netip.AddrFromSlice(raw[i : i+size])
		out = append(out, a)
	}
	return out
}

// fuzzResolver resolves every name to the same addresses and counts the
// lookups (a fuzz function runs one input at a time).
type fuzzResolver struct {
	addrs []netip.Addr
	calls int
}

func (r *fuzzResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.calls++
	return r.addrs, nil
}

// FuzzWebhookURL checks the address guard and the URL normalisation on
// arbitrary URLs, with names resolving to arbitrary addresses: a URL the
// guard accepts reaches only public addresses, when it is checked and when
// it is dialled, and a literal address is never looked up; the normalised URL is printable ASCII, normalises and
// parses to itself and names the host that was checked.
func FuzzWebhookURL(f *testing.F) {
	f.Add("https://receiver.example/hook", []byte{8, 8, 8, 8})
	f.Add("http://receiver.example:8080/h?q=путь#x", []byte{127, 0, 0, 1})
	f.Add("http://[::ffff:127.0.0.1]/", []byte{})
	f.Add("http://[fe80::1%25eth0]:80/", []byte{})
	f.Add("http://[64:ff9b::a9fe:a9fe]/", []byte{})
	f.Add("http://2130706433/", []byte{10, 0, 0, 1, 8, 8, 8, 8})
	f.Add("http://0x7f.1/", []byte{0x20, 0x02, 0x7f, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add("http://localhost./", []byte{8, 8, 8, 8})
	f.Add("http://user:pw@receiver.example/", []byte{8, 8, 8, 8})
	f.Add("https://receiver.example/a\u00a0b", []byte{8, 8, 8, 8})
	f.Add("https://receiver.example:0/", []byte{8, 8, 8, 8})
	f.Add("http://[::ffff:7f00:1]:0/", []byte{})
	f.Add("https://recei%76er.example/", []byte{1, 1, 1, 1})
	for _, tt := range refusedCases {
		f.Add(hostURL(tt.host), []byte{})
	}
	for _, host := range allowedCases {
		f.Add(hostURL(host), []byte{})
	}
	f.Fuzz(func(t *testing.T, raw string, resolved []byte) {
		addrs := fuzzAddrs(resolved)
		r := &fuzzResolver{addrs: addrs}
		g := &webhookGuard{resolver: r}
		err := g.checkURL(t.Context(), raw)
		if u, perr := url.Parse(raw); perr == nil && r.calls > 0 {
			if _, aerr := netip.ParseAddr(u.Hostname()); aerr == nil {
				t.Fatalf("checkURL(%q) resolved a literal address", raw)
			}
		}

		norm, normErr := NormalizeWebhookURL(raw)
		if (normErr == nil) != (ValidateWebhookURL(raw) == nil) {
			t.Fatalf("NormalizeWebhookURL(%q): %v, but ValidateWebhookURL says %v", raw, normErr, ValidateWebhookURL(raw))
		}
		if normErr == nil {
			if strings.Contains(norm, "#") {
				t.Fatalf("NormalizeWebhookURL(%q) = %q keeps a fragment", raw, norm)
			}
			for _, c := range []byte(norm) {
				if c <= ' ' || c >= 0x7f {
					t.Fatalf("NormalizeWebhookURL(%q) = %q: byte %#x", raw, norm, c)
				}
			}
			again, err := NormalizeWebhookURL(norm)
			u, perr := url.Parse(norm)
			if err != nil || again != norm || perr != nil || u.String() != norm {
				t.Fatalf("NormalizeWebhookURL(%q) = %q, normalised again %q, %v, parsed %v", raw, norm, again, err, perr)
			}
			r, _ := url.Parse(raw)
			if u.Hostname() != r.Hostname() || u.Port() != r.Port() {
				t.Fatalf("%q is stored as %q: host %q port %q, checked %q port %q", raw, norm, u.Hostname(), u.Port(), r.Hostname(), r.Port())
			}
		}
		if err != nil {
			return
		}

		if normErr != nil {
			t.Fatalf("checkURL accepted %q, which NormalizeWebhookURL refuses: %v", raw, normErr)
		}
		u, _ := url.Parse(raw)
		host := u.Hostname()
		reached := addrs
		if a, err := netip.ParseAddr(host); err == nil {
			reached = []netip.Addr{a}
		}
		if len(reached) == 0 {
			t.Fatalf("checkURL accepted %q with no address", raw)
		}
		for _, a := range reached {
			if !publicAddr(a) {
				t.Fatalf("checkURL accepted %q, which reaches %s", raw, a)
			}
		}

		// The dial connects to checked addresses only.
		dialer := &stubDialer{}
		g.dialer = dialer
		if _, err := g.dialContext(t.Context(), "tcp", net.JoinHostPort(host, "443")); err == nil || errors.Is(err, ErrWebhookAddressRefused) {
			t.Fatalf("dial %s (accepted by checkURL): %v", host, err)
		}
		for _, d := range dialer.addresses() {
			ap, err := netip.ParseAddrPort(d)
			if err != nil || !publicAddr(ap.Addr()) {
				t.Fatalf("dial %s connected to %s", host, d)
			}
		}
	})
}
