package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
)

// ConnGuard bounds the connections a process serves by its descriptor limit
// (RLIMIT_NOFILE), over every listener (docs/security.md): idle keep-alive
// connections never starve active clients. Above the eviction mark, each
// new connection closes the oldest waiting one: idle between requests, or
// not yet through its first request's headers (a client that opens
// connections and never finishes a request must not hold them against
// everyone else); at the hard limit with none waiting, a new connection is
// closed at once, so that the descriptors the process needs for its
// database, Redis and upstream connections are never spent on clients.
// With a share (PerAddress), one client address holds at most that many
// connections, and has at most that many requests in flight over them
// (limitInFlight).
type ConnGuard struct {
	mu    sync.Mutex
	open  int
	evict int      // above this many, close the oldest waiting connection
	hard  int      // at this many, refuse new connections
	idle  idleList // waiting connections (new or idle), oldest first

	share  int                       // connections one address may hold; 0: no bound
	exempt func(netip.Addr) bool     // addresses without that bound
	byAddr map[netip.Addr]*addrShare // per address, with a share
}

// addrShare is what one client address holds: its connections, and the
// requests in flight over them. An address leaves its guard's map when it
// has neither.
type addrShare struct {
	g     *ConnGuard
	addr  netip.Addr
	limit int32        // the guard's share, when the address first came
	conns atomic.Int32 // changed under the guard's mu
	// requests is counted without the guard's lock: one atomic add when a
	// request starts and one when it ends, however many connections and
	// requests the address has (a mutexed map costs every request).
	requests atomic.Int32
}

// NewConnGuard returns a guard for at most limit connections, closing idle
// ones from three quarters of it on.
func NewConnGuard(limit int) *ConnGuard {
	limit = max(limit, 4)
	return &ConnGuard{evict: limit * 3 / 4, hard: limit}
}

// PerAddress bounds the connections of one client address (an IPv6
// address by its /64) to share, except for the addresses exempt reports
// (trusted proxies, whose connections carry many clients'): a client that
// holds its connections busy (a request body sent a byte at a time) cannot
// take them all. The same share bounds the address's requests in flight
// (limitInFlight): over HTTP/2 one connection carries up to
// MaxStreamsPerConn of them, and an address gets no more than over
// HTTP/1.1, where a connection carries one.
func (g *ConnGuard) PerAddress(share int, exempt func(netip.Addr) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.share, g.exempt = share, exempt
	if g.byAddr == nil { // counts already kept stay (a second server in one process)
		g.byAddr = map[netip.Addr]*addrShare{}
	}
}

// AddressShare is the per-address bound of the process's guard: a sixteenth
// of its connections, at least 64.
func AddressShare(limit int) int { return max(limit/16, 64) }

// LimitConnsPerAddress bounds every listener's connections per client
// address (ConnGuard.PerAddress), exempting the trusted proxies.
func LimitConnsPerAddress(exempt func(netip.Addr) bool) {
	processGuard.PerAddress(AddressShare(processGuard.hard), exempt)
}

// Limit is the guard's connection limit.
func (g *ConnGuard) Limit() int { return g.hard }

// DescriptorConnLimit is the connection limit the descriptor limit allows:
// half of what the metrics listener's MetricsConns leave (a proxied
// connection needs one towards the upstream too), less a reserve for the
// process's own files and pools.
func DescriptorConnLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 512
	}
	n := r.Cur
	if n > 1<<24 {
		n = 1 << 24
	}
	return max((int(n)-MetricsConns)/2-64, 16)
}

// processGuard is the guard of every listener Serve serves.
var processGuard = NewConnGuard(DescriptorConnLimit())

// MetricsConns bounds the connections of the metrics listener, which has a
// guard of its own (NewMetricsGuard) out of the descriptors
// DescriptorConnLimit reserves: with the process's, a flood of the other
// listeners from the scraper's address (the same host, or one NAT) took
// the address's share and Prometheus could no longer scrape.
const MetricsConns = 32

// NewMetricsGuard is the metrics listener's guard: MetricsConns
// connections, a quarter of them (and as many requests in flight) per
// client address but for the addresses exempt reports.
func NewMetricsGuard(exempt func(netip.Addr) bool) *ConnGuard {
	g := NewConnGuard(MetricsConns)
	g.PerAddress(MetricsConns/4, exempt)
	return g
}

// Open reports how many accepted connections are open.
func (g *ConnGuard) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Listener wraps ln so that its connections count against the guard.
func (g *ConnGuard) Listener(ln net.Listener) net.Listener { return &guardedListener{ln, g} }

// Track makes srv report its connections' states to the guard.
func (g *ConnGuard) Track(srv *http.Server) {
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		g.state(c, s)
		if prev != nil {
			prev(c, s)
		}
	}
}

// state runs twice per request on a keep-alive connection (active, then
// idle again): it allocates nothing and looks nothing up, the idle list
// being threaded through the connections themselves.
func (g *ConnGuard) state(c net.Conn, s http.ConnState) {
	gc := guarded(c)
	if gc == nil {
		return // not accepted through this guard's listener
	}
	g.mu.Lock()
	g.idle.remove(gc)
	if s == http.StateIdle || s == http.StateNew { // waiting for a request
		gc.outer = c
		g.idle.push(gc)
	}
	g.mu.Unlock()
}

// guarded finds the guardedConn under c: c itself, or what a TLS
// connection wraps.
func guarded(c net.Conn) *guardedConn {
	for range 4 {
		switch v := c.(type) {
		case *guardedConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// idleList is a doubly linked list of waiting connections through their
// own prev and next fields (guarded by ConnGuard.mu).
type idleList struct {
	head, tail *guardedConn
	n          int
}

func (l *idleList) push(c *guardedConn) {
	c.prev, c.next, c.linked = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *idleList) remove(c *guardedConn) {
	if !c.linked {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
	l.n--
}

type guardedListener struct {
	net.Listener
	g *ConnGuard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g := l.g
		var victims []net.Conn
		addr, bounded := netip.Addr{}, false
		g.mu.Lock()
		if g.share > 0 {
			addr = addressOf(c.RemoteAddr())
			bounded = addr.IsValid() && (g.exempt == nil || !g.exempt(addr))
		}
		var share *addrShare
		if bounded {
			if share = g.byAddr[addr]; share == nil {
				share = &addrShare{g: g, addr: addr, limit: int32(min(g.share, 1<<30))} // #nosec G115 -- bounded just before
				g.byAddr[addr] = share
			}
		}
		refuse := share != nil && int(share.conns.Load()) >= g.share
		for !refuse && g.open >= g.evict && g.idle.n > 0 {
			v := g.idle.head
			g.idle.remove(v)
			victims = append(victims, v.outer)
		}
		refuse = refuse || g.open >= g.hard && len(victims) == 0
		if !refuse {
			g.open++
			if share != nil {
				share.conns.Add(1)
			}
		} else if share != nil {
			g.forget(share)
		}
		g.mu.Unlock()
		for _, v := range victims {
			_ = v.Close() // its Close (below) gives its count back
		}
		if refuse {
			_ = c.Close() // refused: nothing was read from it
			continue
		}
		return &guardedConn{Conn: c, g: g, share: share}, nil
	}
}

// addressOf is the client address a connection counts under: its IP, or
// the /64 of an IPv6 address (one subscriber's).
func addressOf(a net.Addr) netip.Addr {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return netip.Addr{}
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// guardedConn gives its count back once, when closed (also after a
// hijack: an upgraded connection counts until it ends).
type guardedConn struct {
	net.Conn
	g    *ConnGuard
	once sync.Once

	// Guarded by g.mu: the place in g's idle list, and the connection as
	// net/http reported it idle (a *tls.Conn over this one, over TLS),
	// which is what an eviction closes.
	prev, next *guardedConn
	linked     bool
	outer      net.Conn
	// share is what the connection's address holds (nil: no share).
	share *addrShare
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.idle.remove(c)
		c.outer = nil
		c.g.open--
		if c.share != nil {
			c.share.conns.Add(-1)
			c.g.forget(c.share)
		}
		c.g.mu.Unlock()
	})
	return err
}

// forget removes s from the map once its address holds nothing (g.mu
// held). An address whose requests outlive its last connection (HTTP/2
// handlers end after their connection closes) stays until the last one
// ends: a new connection then finds their count.
func (g *ConnGuard) forget(s *addrShare) {
	if s.conns.Load() == 0 && s.requests.Load() == 0 && g.byAddr[s.addr] == s {
		delete(g.byAddr, s.addr)
	}
}

// shareKey is the context key of a connection's *addrShare (connContext).
type shareKey struct{}

// connContext puts the share of c's address in its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc := guarded(c); gc != nil && gc.share != nil {
		return context.WithValue(ctx, shareKey{}, gc.share)
	}
	return ctx
}

// errTooManyInFlight answers a request past its address's share.
var errTooManyInFlight = &btk.Error{Code: btk.CodeUnavailable, Message: "too many requests in flight from this address; retry shortly"}

// limitInFlight answers 503 at once, with Retry-After, a request past its
// client address's share of requests in flight (ConnGuard.PerAddress), on
// a connection its guard counts (ServeGuarded): a request whose body
// stalls holds the body read so far, and over HTTP/2 one address's share of
// connections carried 100 times as many requests (docs/security.md). It is
// a handler, not part of ServeGuarded, so that the metrics and the access
// log see the refusals.
func limitInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := r.Context().Value(shareKey{}).(*addrShare)
		if s == nil {
			next.ServeHTTP(w, r)
			return
		}
		if s.requests.Add(1) > s.limit {
			s.done()
			gateway.Busy(w, r, errTooManyInFlight)
			return
		}
		defer s.done()
		next.ServeHTTP(w, r)
	})
}

// done ends one of the address's requests.
func (s *addrShare) done() {
	if s.requests.Add(-1) == 0 && s.conns.Load() == 0 { // its connections are gone
		s.g.mu.Lock()
		s.g.forget(s)
		s.g.mu.Unlock()
	}
}
