package testproc

import (
	"bytes"
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
// is forwarded either way) and heal it; or lose the answer to one message
// (LoseAnswer). Cut runs when the test ends.
type Relay struct {
	Addr string

	t      T
	mu     sync.Mutex
	target string
	ln     net.Listener
	conns  []net.Conn
	hung   bool
	// loseAfter, when set, is what a client sends that ends its connection
	// before the server's answer is relayed (once).
	loseAfter []byte
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
				go r.pipe(nil, c, true)
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
			go r.pipe(up, c, true) // a relay ends when either side does
			go r.pipe(c, up, false)
		}
	}()
}

// pipe copies src to dst (nil: nowhere) until src ends, then closes dst.
// While the relay hangs, what src sends is read and dropped. fromClient is
// set on the client's half, which LoseAnswer watches.
func (r *Relay) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !r.isHung() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
			if fromClient && r.takeLoseAfter(buf[:n]) {
				// The message reached the server; its answer never reaches
				// the client. The server's side closes a moment later, once
				// it has surely read what was sent.
				_ = src.Close()
				time.AfterFunc(500*time.Millisecond, func() { _ = dst.Close() })
				return
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

// LoseAnswer arms the relay once: the first time a client sends something
// that contains marker (in one read), it is forwarded and that client's
// connection is closed before the server's answer comes back — a COMMIT
// that reached the database whose answer the network lost.
func (r *Relay) LoseAnswer(marker []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loseAfter = marker
}

func (r *Relay) takeLoseAfter(sent []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loseAfter == nil || !bytes.Contains(sent, r.loseAfter) {
		return false
	}
	r.loseAfter = nil
	return true
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
