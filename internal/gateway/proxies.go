package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies are the peers whose X-Forwarded-For is believed
// (--trusted-proxies). The zero value and nil trust no one.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies reads a comma-separated list of CIDR ranges or single
// addresses ("10.0.0.0/8, 192.0.2.7, fd00::/8"). An empty list trusts no one.
func ParseTrustedProxies(list string) (*TrustedProxies, error) {
	tp := &TrustedProxies{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("trusted proxies: %q is not a CIDR range", s)
			}
			p = p.Masked()
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxies: %q is not an IP address or CIDR range", s)
			}
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() { // ::ffff:10.0.0.0/104 means 10.0.0.0/8
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		tp.prefixes = append(tp.prefixes, p)
	}
	return tp, nil
}

// String lists the ranges, for the startup log.
func (tp *TrustedProxies) String() string {
	if tp == nil {
		return ""
	}
	s := make([]string, len(tp.prefixes))
	for i, p := range tp.prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Trusts reports whether a is a trusted proxy (none, with no list).
func (tp *TrustedProxies) Trusts(a netip.Addr) bool { return tp != nil && tp.trusts(a) }

func (tp *TrustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP is the address of the client that made r. It is the TCP peer,
// unless the peer is a trusted proxy: then X-Forwarded-For is read from the
// right (each proxy appends the address it received the request from), and
// the first address that is not itself a trusted proxy is the client. What
// lies further left was written by the client or an untrusted hop and could
// be anything, so it is never reached. An entry that is not an IP address
// stops the walk at the last trusted hop.
func (tp *TrustedProxies) ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if tp == nil || len(tp.prefixes) == 0 {
		return host
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !tp.trusts(peer) {
		return host
	}
	return tp.forwardedClient(r, peer.Unmap()).String()
}

// ClientAddr is ClientIP as an address, for the key check's network rule
// (docs/access.md): the zero Addr when the peer's address does not parse,
// or when a trusted hop's X-Forwarded-For entry is no address (where
// ClientIP names that hop, for the audit row).
// It allocates nothing.
func (tp *TrustedProxies) ClientAddr(r *http.Request) netip.Addr {
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		peer = ap.Addr().Unmap()
	} else if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		peer = a.Unmap()
	} else {
		return netip.Addr{}
	}
	if tp == nil || len(tp.prefixes) == 0 || !tp.trusts(peer) {
		return peer
	}
	client, known := tp.walkForwarded(r, peer)
	if !known {
		// A trusted hop wrote something that is no address ("unix:" from
		// an nginx on a socket, "unknown"): the client is unknown, and a
		// key with networks is refused, rather than taken for the proxy.
		return netip.Addr{}
	}
	return client
}

// forwardedClient walks X-Forwarded-For from the right, starting at the
// trusted peer: the client is the first hop not trusted, or the last one
// that parsed when an entry does not, or the left-most when every hop is
// trusted. It allocates nothing.
func (tp *TrustedProxies) forwardedClient(r *http.Request, peer netip.Addr) netip.Addr {
	client, _ := tp.walkForwarded(r, peer)
	return client
}

// walkForwarded is forwardedClient, and whether the walk ended on an
// address (false: at an entry that is not one).
func (tp *TrustedProxies) walkForwarded(r *http.Request, peer netip.Addr) (netip.Addr, bool) {
	client := peer
	values := r.Header.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- { // several header lines are one list, in order
		v := values[i]
		for v != "" {
			var entry string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				entry, v = v, ""
			}
			a, ok := forwardedAddr(strings.TrimSpace(entry))
			if !ok {
				return client, false
			}
			client = a
			if !tp.trusts(a) {
				return client, true
			}
		}
	}
	return client, true
}

// forwardedAddr parses an X-Forwarded-For entry: an address, possibly with a
// port ("192.0.2.1:1234", "[2001:db8::1]:443") as some proxies write it.
func forwardedAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
