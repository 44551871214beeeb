package server

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
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
// With a share (PerAddress), one client address holds at most that many.
type ConnGuard struct {
	mu    sync.Mutex
	open  int
	evict int      // above this many, close the oldest waiting connection
	hard  int      // at this many, refuse new connections
	idle  idleList // waiting connections (new or idle), oldest first

	share  int                   // connections one address may hold; 0: no bound
	exempt func(netip.Addr) bool // addresses without that bound
	byAddr map[netip.Addr]int    // open connections per address, with a share
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
// take them all.
func (g *ConnGuard) PerAddress(share int, exempt func(netip.Addr) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.share, g.exempt = share, exempt
	if g.byAddr == nil { // counts already kept stay (a second server in one process)
		g.byAddr = map[netip.Addr]int{}
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
// half of it (a proxied connection needs one towards the upstream too),
// less a reserve for the process's own files and pools.
func DescriptorConnLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 512
	}
	n := r.Cur
	if n > 1<<24 {
		n = 1 << 24
	}
	return max(int(n)/2-64, 16)
}

// processGuard is the guard of every listener Serve serves.
var processGuard = NewConnGuard(DescriptorConnLimit())

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
		refuse := bounded && g.byAddr[addr] >= g.share
		for !refuse && g.open >= g.evict && g.idle.n > 0 {
			v := g.idle.head
			g.idle.remove(v)
			victims = append(victims, v.outer)
		}
		refuse = refuse || g.open >= g.hard && len(victims) == 0
		if !refuse {
			g.open++
			if bounded {
				g.byAddr[addr]++
			}
		}
		g.mu.Unlock()
		for _, v := range victims {
			_ = v.Close() // its Close (below) gives its count back
		}
		if refuse {
			_ = c.Close() // refused: nothing was read from it
			continue
		}
		gc := &guardedConn{Conn: c, g: g}
		if bounded {
			gc.addr = addr
		}
		return gc, nil
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
	// addr is the address the connection counts under in byAddr (invalid:
	// none).
	addr netip.Addr
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.idle.remove(c)
		c.outer = nil
		c.g.open--
		if c.addr.IsValid() {
			if n := c.g.byAddr[c.addr] - 1; n > 0 {
				c.g.byAddr[c.addr] = n
			} else {
				delete(c.g.byAddr, c.addr)
			}
		}
		c.g.mu.Unlock()
	})
	return err
}
