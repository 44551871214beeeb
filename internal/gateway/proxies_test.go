package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/btk-project/btk/internal/gateway"
)

func TestTrustedProxiesClientIP(t *testing.T) {
	tp, err := gateway.ParseTrustedProxies(" 10.0.0.0/8, 192.0.2.7 ,fd00::/8, ::ffff:172.16.0.0/108")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		peer   string
		xff    []string
		wantIP string
	}{
		{"untrusted peer: header ignored", "198.51.100.1:5000", []string{"203.0.113.9"}, "198.51.100.1"},
		{"trusted peer, no header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"trusted peer: the client it saw", "10.1.2.3:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"a spoofed left part is never reached", "10.1.2.3:5000", []string{"6.6.6.6, 203.0.113.9"}, "203.0.113.9"},
		{"trusted hops are skipped from the right", "10.1.2.3:5000", []string{"203.0.113.9, 10.9.9.9, 192.0.2.7"}, "203.0.113.9"},
		{"several header lines are one list", "10.1.2.3:5000", []string{"6.6.6.6, 203.0.113.9", "10.9.9.9"}, "203.0.113.9"},
		{"every hop trusted: the left-most", "10.1.2.3:5000", []string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"garbage stops at the last trusted hop", "10.1.2.3:5000", []string{"203.0.113.9, not-an-ip"}, "10.1.2.3"},
		{"garbage left of the client is not reached", "10.1.2.3:5000", []string{"<script>, 203.0.113.9"}, "203.0.113.9"},
		{"entries with ports", "10.1.2.3:5000", []string{"[2001:db8::1]:443, 203.0.113.9:1234"}, "203.0.113.9"},
		{"IPv6 client", "[fd00::1]:5000", []string{"2001:db8::1"}, "2001:db8::1"},
		{"IPv4-mapped peer", "[::ffff:10.1.2.3]:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"mapped range", "172.16.5.5:80", []string{"203.0.113.9"}, "203.0.113.9"},
		{"single address", "192.0.2.7:80", []string{"203.0.113.9"}, "203.0.113.9"},
		{"a neighbour of the single address", "192.0.2.8:80", []string{"203.0.113.9"}, "192.0.2.8"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := tp.ClientIP(r); got != c.wantIP {
			t.Errorf("%s: ClientIP = %q, want %q", c.name, got, c.wantIP)
		}
	}

	// For the key check's networks, a hop that names no address leaves the
	// client unknown: it is not taken for the proxy.
	for xff, want := range map[string]string{
		"203.0.113.9, not-an-ip": "invalid IP",
		"unix:":                  "invalid IP",
		"203.0.113.9":            "203.0.113.9",
		"10.0.0.1, 10.0.0.2":     "10.0.0.1",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.2.3:5000"
		r.Header.Set("X-Forwarded-For", xff)
		if got := tp.ClientAddr(r).String(); got != want {
			t.Errorf("X-Forwarded-For %q: ClientAddr = %s, want %s", xff, got, want)
		}
	}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:5000"
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	var none *gateway.TrustedProxies
	if got := none.ClientIP(r); got != "10.1.2.3" {
		t.Errorf("no trusted proxies: ClientIP = %q, want the peer", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8;"} {
		if _, err := gateway.ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q) accepted", bad)
		}
	}
}

// docs/operating.md#behind-a-load-balancer-trusted-proxies through HTTP: X-Forwarded-For from a trusted peer reaches the
// audit row and the access log; from any other peer it is ignored.

// Trusts is what exempts a proxy from the per-address connection share
// (btk serve's guard): the listed ranges, IPv4 also as IPv4-mapped IPv6,
// and nothing without a list.
func TestTrustedProxiesTrusts(t *testing.T) {
	tp, err := gateway.ParseTrustedProxies("10.0.0.0/8,192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	none, err := gateway.ParseTrustedProxies("")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		tp   *gateway.TrustedProxies
		addr string
		want bool
	}{
		{tp, "10.1.2.3", true}, {tp, "::ffff:10.1.2.3", true}, {tp, "192.0.2.7", true},
		{tp, "192.0.2.8", false}, {tp, "127.0.0.1", false},
		{none, "10.1.2.3", false}, {nil, "10.1.2.3", false},
	} {
		if got := c.tp.Trusts(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("case %d: Trusts(%s) = %v, want %v", i, c.addr, got, c.want)
		}
	}
}
