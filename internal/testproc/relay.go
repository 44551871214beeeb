package testproc

import (
	"net"
	"sync"
	"time"
)

// Relay forwards the TCP connections made to Addr, a port of 127.0.0.1, to
// a target, as a load balancer or a virtual address in front of a server
// does. The test can switch the target; cut the network (the listener
// closes and every relayed connection drops: the client sees its
// connections refused and reset) and restore it on the same port; or hang it
// (a black hole: connections stay open, new ones are accepted, and nothing
// is forwarded either way) and heal it. Cut runs when the test ends.
type Relay struct {
	Addr string

	t      T
	mu     sync.Mutex
	target string
	ln     net.Listener
	conns  []net.Conn
	hung   bool
}

// NewRelay starts a relay to target.
func NewRelay(t T, target string) *Relay {
	t.Helper()
	r := &Relay{t: t, target: target}
	r.listen("127.0.0.1:0")
	t.Cleanup(r.Cut)
	return r
}

func (r *Relay) listen(addr string) {
	r.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatalf("%v", err)
	}
	r.mu.Lock()
	r.ln, r.Addr = ln, ln.Addr().String()
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			target, hung := r.target, r.hung
			if hung {
				// Held open and never answered, as behind a black hole.
				r.conns = append(r.conns, c)
				r.mu.Unlock()
				go r.pipe(nil, c)
				continue
			}
			r.mu.Unlock()
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go r.pipe(up, c) // a relay ends when either side does
			go r.pipe(c, up)
		}
	}()
}

// pipe copies src to dst (nil: nowhere) until src ends, then closes dst.
// While the relay hangs, what src sends is read and dropped.
func (r *Relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !r.isHung() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if dst != nil {
		_ = dst.Close()
	}
}

func (r *Relay) isHung() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hung
}

// Hang stops forwarding without closing anything: the relayed connections
// stay open and carry nothing more, and new connections are accepted and
// never answered — a network that drops packets, not one that refuses them.
func (r *Relay) Hang() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hung = true
}

// Heal ends Hang: the connections held meanwhile drop (what was sent on them
// was lost) and new ones are forwarded again.
func (r *Relay) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hung = false
	r.dropLocked()
}

// Switch sends new connections to target and drops the relayed ones.
func (r *Relay) Switch(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target = target
	r.dropLocked()
}

// Cut closes the listener and drops every relayed connection.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		_ = r.ln.Close()
		r.ln = nil
	}
	r.dropLocked()
}

// Restore listens again on Addr after Cut.
func (r *Relay) Restore() {
	r.t.Helper()
	r.listen(r.Addr)
}

func (r *Relay) dropLocked() {
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
}
