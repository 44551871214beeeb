package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/server"
	"github.com/btk-project/btk/internal/testproc"
)

// The metrics listener counts its connections apart (docs/operating.md#metrics):
// it shared the connection guard with the API, so a client that took its
// address's share of the API's connections (a flood from the scraper's
// host, or from behind the same NAT) had the scraper's connections refused
// too. Here one address holds its whole share of the API's connections with
// requests whose bodies never come; the API refuses it another, and
// /metrics still answers it.
func TestMetricsListenerHasItsOwnConnections(t *testing.T) {
	share := server.AddressShare(server.DescriptorConnLimit()) // the process inherits this one's descriptor limit
	if share > 4096 {
		t.Skipf("the descriptor limit gives one address a share of %d connections, more than this test opens", share)
	}
	parallelUnlessShort(t, "starts a btk serve process")
	metricsAddr := testproc.FreeAddr(t)
	p := startServe(t, filepath.Join(t.TempDir(), "btk.db"), "--metrics-addr", metricsAddr)
	addr := strings.TrimPrefix(p.url, "http://")
	busy := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /graphql HTTP/1.1\r\nHost: btk\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		return c
	}
	for range share {
		c := busy()
		defer c.Close()
	}
	// The share is taken: the next connection is closed unanswered (EOF,
	// or a reset: what it sent was not read).
	c := busy()
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection past the address's share of %d: read %d bytes, %v; want it closed", share, n, err)
	}
	res, err := testHTTP.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("/metrics from the address that holds its share of the API's connections: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", res.StatusCode)
	}
}
