package server

import (
	"net"
	"net/http"
	"sync"
	"syscall"
)

// ConnGuard bounds the connections a process serves by its descriptor limit
// (RLIMIT_NOFILE), over every listener (docs/security.md): idle keep-alive
// connections never starve active clients. Above the eviction mark, each
// new connection closes the oldest idle one (idle the longest); at the hard
// limit with none idle, a new connection is closed at once, so that the
// descriptors the process needs for its database, Redis and upstream
// connections are never spent on clients.
type ConnGuard struct {
	mu    sync.Mutex
	open  int
	evict int      // above this many, close the oldest idle connection
	hard  int      // at this many, refuse new connections
	idle  idleList // idle connections, oldest first
}

// NewConnGuard returns a guard for at most limit connections, closing idle
// ones from three quarters of it on.
func NewConnGuard(limit int) *ConnGuard {
	limit = max(limit, 4)
	return &ConnGuard{evict: limit * 3 / 4, hard: limit}
}

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
	if s == http.StateIdle {
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

// idleList is a doubly linked list of idle connections through their own
// prev and next fields (guarded by ConnGuard.mu).
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
		g.mu.Lock()
		for g.open >= g.evict && g.idle.n > 0 {
			v := g.idle.head
			g.idle.remove(v)
			victims = append(victims, v.outer)
		}
		refuse := g.open >= g.hard && len(victims) == 0
		if !refuse {
			g.open++
		}
		g.mu.Unlock()
		for _, v := range victims {
			_ = v.Close() // its Close (below) gives its count back
		}
		if refuse {
			_ = c.Close() // refused: nothing was read from it
			continue
		}
		return &guardedConn{Conn: c, g: g}, nil
	}
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
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.idle.remove(c)
		c.outer = nil
		c.g.open--
		c.g.mu.Unlock()
	})
	return err
}
