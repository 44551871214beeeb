package server

import (
	"container/list"
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
	evict int // above this many, close the oldest idle connection
	hard  int // at this many, refuse new connections
	idle  *list.List
	where map[net.Conn]*list.Element // idle connections (as ConnState sees them)
}

// NewConnGuard returns a guard for at most limit connections, closing idle
// ones from three quarters of it on.
func NewConnGuard(limit int) *ConnGuard {
	limit = max(limit, 4)
	return &ConnGuard{evict: limit * 3 / 4, hard: limit, idle: list.New(), where: map[net.Conn]*list.Element{}}
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

func (g *ConnGuard) state(c net.Conn, s http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.where[c]; ok {
		g.idle.Remove(e)
		delete(g.where, c)
	}
	if s == http.StateIdle {
		g.where[c] = g.idle.PushBack(c)
	}
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
		for g.open >= g.evict && g.idle.Len() > 0 {
			v := g.idle.Remove(g.idle.Front()).(net.Conn)
			delete(g.where, v)
			victims = append(victims, v)
		}
		refuse := g.open >= g.hard && len(victims) == 0
		if !refuse {
			g.open++
		}
		g.mu.Unlock()
		for _, v := range victims {
			v.Close() // its Close (below) gives its count back
		}
		if refuse {
			c.Close()
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
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.open--
		c.g.mu.Unlock()
	})
	return err
}
