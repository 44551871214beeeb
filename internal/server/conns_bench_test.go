package server_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/btk-project/btk/internal/server"
)

// pipeListener hands out one end of an in-memory pipe per Accept.
type pipeListener struct{ peers []net.Conn }

func (l *pipeListener) Accept() (net.Conn, error) {
	a, b := net.Pipe()
	l.peers = append(l.peers, b)
	return a, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// BenchmarkConnGuardRequest is what the connection guard adds to each
// request on a keep-alive connection: net/http reports it active, then idle
// again (bench/README.md). 64 connections open, taken in turn.
func BenchmarkConnGuardRequest(b *testing.B) {
	g := server.NewConnGuard(1 << 20)
	pl := &pipeListener{}
	ln := g.Listener(pl)
	srv := &http.Server{}
	g.Track(srv)
	conns := make([]net.Conn, 64)
	for i := range conns {
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
		srv.ConnState(c, http.StateNew)
		srv.ConnState(c, http.StateActive)
		srv.ConnState(c, http.StateIdle)
	}
	b.Cleanup(func() {
		for i, c := range conns {
			c.Close()
			pl.peers[i].Close()
		}
	})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c := conns[i&63]
		srv.ConnState(c, http.StateActive)
		srv.ConnState(c, http.StateIdle)
		i++
	}
	if n := g.Open(); n != len(conns) {
		b.Fatalf("%d open, want %d", n, len(conns))
	}
}
