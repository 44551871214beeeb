package events_test

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
)

// Addresses that reach a private IPv4 address through a translation
// (NAT64's prefixes, 6to4) or an old embedding (IPv4-compatible) are
// private too: on an IPv6-only host with NAT64, http://[64:ff9b::a00:1]/
// is 10.0.0.1.
func TestTranslatedPrivateAddressesRefused(t *testing.T) {
	for _, a := range []string{"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b:1::c0a8:101",
		"2002:7f00:1::1", "2002:a00:1::", "::7f00:1", "::a00:1", "::ffff:10.0.0.1",
		// SIIT's IPv4-translated form is refused whatever it embeds.
		"::ffff:0:a9fe:a9fe", "::ffff:0:a00:1", "::ffff:0:5db8:d70e"} {
		if !btk.PrivateAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is not private", a)
		}
	}
	for _, a := range []string{"64:ff9b::5db8:d70e", "2002:5db8:d70e::1", "2606:4700::1111", "93.184.215.14"} {
		if btk.PrivateAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is private", a)
		}
	}
	h := newHarness(t, newSQLite(t), btk.Config{})
	for _, u := range []string{"http://[64:ff9b::7f00:1]/", "http://[64:ff9b::a9fe:a9fe]/latest", "http://[2002:a00:1::]/", "http://[::7f00:1]/",
		"http://[::ffff:0:a9fe:a9fe]/latest"} {
		if _, err := h.svc.CreateWebhook(ctx, h.owner, u, nil); btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("%s: err %v, want BAD_USER_INPUT", u, err)
		}
	}
	// The delivery client's dialer refuses it too, before connecting.
	resp, err := events.NewClient(false, 2*time.Second).Get("http://[::ffff:0:a9fe:a9fe]/latest")
	if err == nil {
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "--webhook-allow-private") {
		t.Errorf("delivering to [::ffff:0:a9fe:a9fe]: err %v, want the private-receiver refusal", err)
	}
}

// The special-purpose ranges that are not globally reachable, beyond
// private and loopback, are refused too, and a port must be one: an attack
// had http://[fec0::1]/, http://198.18.0.1/ and ports 0 and 99999 accepted,
// and a later one [2001:2::1], [2001:10::1], [3fff::1], [5f00::1] and
// 192.88.99.1. The rows of IANA's special-purpose registries that are
// globally reachable networks stay allowed (ORCHIDv2 2001:20::/28 among
// them).
func TestNonGlobalAddressesAndBadPortsRefused(t *testing.T) {
	for _, a := range []string{"fec0::1", "198.18.0.1", "198.19.255.254", "192.0.0.8", "192.0.2.1", "198.51.100.7",
		"203.0.113.9", "240.0.0.1", "255.255.255.255", "2001:db8::1", "100::1", "::ffff:198.18.0.1", "64:ff9b::c612:1",
		"0.1.2.3", "192.0.0.9", "192.0.0.170", "192.88.99.1", "192.88.99.2", "::ffff:192.88.99.1",
		"100:0:0:1::1", "2001:1::1", "2001:1::3", "2001:2::1", "2001:10::1", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
		"3fff::1", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "5f00::1", "5f00:ffff::1",
		// outside 2000::/3, the only global unicast block: unassigned, or assigned after this list
		"4000::1", "1000::1", "e000::1", "::1:0:0:1"} {
		if !btk.PrivateAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is not refused", a)
		}
	}
	for _, a := range []string{"198.20.0.1", "192.0.3.1", "223.255.255.1", "2001:db9::1",
		"192.88.98.1", "192.88.100.1", "192.31.196.1", "192.52.193.1", "192.175.48.1",
		"2001:200::1", "2001:3::1", "2001:4:112::1", "2001:20::1", "2001:2f:ffff::1", "2001:30::1",
		"2620:4f:8000::1", "3fff:1000::1", "3ffe::1", "2c0f:f248::1"} {
		if btk.PrivateAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is refused", a)
		}
	}
	h := newHarness(t, newSQLite(t), btk.Config{})
	for _, u := range []string{"http://[fec0::1]/", "http://198.18.0.1/", "http://[2001:2::1]/", "http://[2001:10::1]/",
		"http://[3fff::1]/", "http://[5f00::1]/", "http://192.88.99.1/", "https://93.184.215.14:0/", "https://93.184.215.14:99999/", "https://93.184.215.14:/"} {
		if _, err := h.svc.CreateWebhook(ctx, h.owner, u, nil); btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Errorf("%s: err %v, want BAD_USER_INPUT", u, err)
		}
	}
	if _, err := h.svc.CreateWebhook(ctx, h.owner, "https://93.184.215.14:8443/hook", nil); err != nil {
		t.Errorf("a public address with a port: %v", err)
	}
	if _, err := h.svc.CreateWebhook(ctx, h.owner, "https://[2001:20::1]/hook", nil); err != nil {
		t.Errorf("ORCHIDv2, globally reachable in IANA's registry: %v", err)
	}
	// With private receivers allowed, a port must still be one.
	hp := newHarness(t, newSQLite(t), btk.Config{WebhookAllowPrivate: true})
	if _, err := hp.svc.CreateWebhook(ctx, hp.owner, "http://127.0.0.1:70000/", nil); btk.ErrorCode(err) != btk.CodeBadUserInput {
		t.Errorf("port 70000 with private receivers allowed: err %v, want BAD_USER_INPUT", err)
	}
}

// A receiver's answer is read within bounds: its header block at most
// 64 KiB (Go's default for a client is 10 MB, per worker).
func TestReceiverHeadersBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				req.Body.Close()
				w := bufio.NewWriter(c)
				w.WriteString("HTTP/1.1 204 No Content\r\n")
				for range 1024 { // 1 MiB of headers
					w.WriteString("X-Pad: " + strings.Repeat("a", 1014) + "\r\n")
				}
				w.WriteString("\r\n")
				w.Flush()
			}()
		}
	}()
	resp, err := events.NewClient(true, 5*time.Second).Post("http://"+l.Addr().String()+"/", "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a 1 MiB header block was read whole (HTTP %d)", resp.StatusCode)
	}
}
