package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/server"
)

func TestTrustedProxiesAudit(t *testing.T) {
	e := newEnv(t)
	tp, err := gateway.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{e.logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := server.New(e.svc, e.db, log, server.WithTrustedProxies(tp))
	admin := e.admin()

	post := func(peer, xff, query string, vars map[string]any) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		r := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
		r.RemoteAddr = peer
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+admin.Bearer)
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var out struct {
			Data   map[string]any
			Errors []any
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusOK || len(out.Errors) > 0 {
			t.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
		return out.Data
	}
	create := `mutation($n:String!){createApiKey(input:{name:$n}){apiKey{id}}}`
	idOf := func(d map[string]any) string {
		return d["createApiKey"].(map[string]any)["apiKey"].(map[string]any)["id"].(string)
	}
	viaProxy := idOf(post("10.0.0.5:41000", "6.6.6.6, 203.0.113.9", create, map[string]any{"n": "via-proxy"}))
	direct := idOf(post("198.51.100.20:41000", "203.0.113.9", create, map[string]any{"n": "direct"}))

	var audit struct {
		ApiKeyAuditLog struct {
			Nodes []struct{ ApiKeyId, Ip string }
		}
	}
	e.must(admin, `{apiKeyAuditLog{nodes{apiKeyId ip}}}`, nil, &audit)
	ips := map[string]string{}
	for _, n := range audit.ApiKeyAuditLog.Nodes {
		ips[n.ApiKeyId] = n.Ip
	}
	if ips[viaProxy] != "203.0.113.9" {
		t.Errorf("audit IP through a trusted proxy = %q, want the forwarded 203.0.113.9", ips[viaProxy])
	}
	if ips[direct] != "198.51.100.20" {
		t.Errorf("audit IP from an untrusted peer = %q, want the peer 198.51.100.20 (X-Forwarded-For ignored)", ips[direct])
	}
	e.logMu.Lock()
	text := logs.String()
	e.logMu.Unlock()
	if !strings.Contains(text, "ip=203.0.113.9") || !strings.Contains(text, "ip=198.51.100.20") || strings.Contains(text, "ip=10.0.0.5") {
		t.Errorf("access log IPs:\n%s", text)
	}
}

// The login throttle counts attempts per client address: behind a trusted
// proxy, per forwarded address, so one client spending its attempts does
// not lock out the others behind the same proxy.
func TestTrustedProxiesThrottle(t *testing.T) {
	if testing.Short() {
		t.Skip("30 password checks")
	}
	e := newEnv(t)
	tp, _ := gateway.ParseTrustedProxies("10.0.0.0/8")
	h := server.New(e.svc, e.db, slog.New(slog.NewTextHandler(io.Discard, nil)), server.WithTrustedProxies(tp))
	login := func(client string, i int) string {
		body, _ := json.Marshal(map[string]any{
			"query":     `mutation($e:String!){login(email:$e,password:"wrong-password-123"){accessToken}}`,
			"variables": map[string]any{"e": fmt.Sprintf("nobody%d@example.com", i)},
		})
		r := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body))
		r.RemoteAddr = "10.0.0.5:41000"
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var out struct {
			Errors []struct{ Extensions struct{ Code string } }
		}
		json.Unmarshal(w.Body.Bytes(), &out)
		if len(out.Errors) == 0 {
			t.Fatalf("login succeeded: %s", w.Body)
		}
		return out.Errors[0].Extensions.Code
	}
	var last string
	for i := range 31 { // the address budget is 30 a minute
		last = login("203.0.113.9", i)
	}
	if last != "RATE_LIMITED" {
		t.Fatalf("31st attempt from one forwarded address: %s, want RATE_LIMITED", last)
	}
	if code := login("203.0.113.10", 100); code == "RATE_LIMITED" {
		t.Errorf("another client behind the same proxy is throttled too")
	}
}
