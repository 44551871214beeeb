package testproc

import (
	"io"
	"net"
	"sync"
	"time"
)

// Relay forwards the TCP connections made to Addr, a port of 127.0.0.1, to
// a target, as a load balancer or a virtual address in front of a server
// does. The test can switch the target, or cut the network (the listener
// closes and every relayed connection drops) and restore it on the same
// port. Cut runs when the test ends.
type Relay struct {
	Addr string

	t      T
	mu     sync.Mutex
	target string
	ln     net.Listener
	conns  []net.Conn
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
			target := r.target
			r.mu.Unlock()
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }() // a relay ends when either side does
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
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
