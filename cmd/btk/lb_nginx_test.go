package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/testproc"
)

// TestNginxLoadBalancerExample runs Debian's nginx with the load-balancer
// example of docs/clusters.md (docs/gateway/nginx-lb.conf, only addresses and
// certificate paths changed) in front of `btk serve --trusted-proxies`, and a
// client that forges X-Forwarded-For (docs/clusters.md#a-load-balancer-in-front). The client talks from
// 127.0.0.2 and nginx to btk from 127.0.0.1, the one trusted proxy.
func TestNginxLoadBalancerExample(t *testing.T) {
	skipIfShort(t, "starts btk serve and nginx")
	bin := testproc.Need(t, "nginx", "nginx")
	// The client needs an address of its own, apart from nginx's 127.0.0.1.
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no second loopback address 127.0.0.2 for the client (%v)", err)
	} else {
		ln.Close()
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "gateway", "nginx-lb.conf"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "clusters.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, append(append([]byte("```nginx\n"), raw...), "```"...)) {
		t.Fatal("docs/clusters.md does not show docs/gateway/nginx-lb.conf verbatim")
	}
	conf := string(raw)

	t.Run("as documented", func(t *testing.T) {
		base := startLoadBalancer(t, bin, conf)
		ip := forgedLoginAddress(t, base)
		if ip != "127.0.0.2" {
			t.Errorf("audit address %q, want the client's real 127.0.0.2 (the forged one must not count)", ip)
		}
		// 5 a minute per account and address: the sixth is refused,
		// whatever address each one claimed.
		if n := guessesBeforeThrottle(t, base); n != 5 {
			t.Errorf("%d wrong passwords from forged addresses before RATE_LIMITED, want 5 (the budget of one address)", n)
		}
	})

	// The same config without the X-Forwarded-For line: nginx passes the
	// client's header on, and the forged address wins. This is what the
	// line is for, and shows the test above can tell.
	t.Run("without X-Forwarded-For", func(t *testing.T) {
		line := "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
		if !strings.Contains(conf, line) {
			t.Fatalf("nginx-lb.conf has no line %q", line)
		}
		base := startLoadBalancer(t, bin, strings.Replace(conf, line, "", 1))
		if ip := forgedLoginAddress(t, base); ip != "203.0.113.7" {
			t.Errorf("audit address %q: expected the forged 203.0.113.7 to win without the line", ip)
		}
		if n := guessesBeforeThrottle(t, base); n != 12 {
			t.Errorf("%d wrong passwords before RATE_LIMITED: expected forged addresses to dodge the throttle without the line", n)
		}
	})
}

// lbClient talks HTTPS to nginx from 127.0.0.2, trusting any certificate
// (the test's own, made for 127.0.0.1).
var lbClient = &http.Client{
	Timeout: 15 * time.Second,
	Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
		// #nosec G402 -- a certificate made by this test for loopback
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	},
}

// startLoadBalancer starts btk serve (trusting 127.0.0.1) and nginx with
// conf in front of it, and returns nginx's https base address.
func startLoadBalancer(t *testing.T, bin, conf string) string {
	t.Helper()
	dir := t.TempDir()
	btk := startServe(t, filepath.Join(dir, "btk.db"), "--trusted-proxies", "127.0.0.1/32")
	btkAddr := strings.TrimPrefix(btk.url, "http://")
	ca := newTestCA(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, 2, certFile, keyFile)
	lbAddr := testproc.FreeAddr(t)
	for _, r := range [][2]string{
		{"10.0.0.11:8080", btkAddr}, {"10.0.0.12:8080", btkAddr}, {"10.0.0.13:8080", btkAddr},
		{"listen 443 ssl;", "listen " + lbAddr + " ssl;"},
		{"/etc/ssl/certs/keys.example.com.pem", certFile},
		{"/etc/ssl/private/keys.example.com.key", keyFile},
	} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("nginx-lb.conf does not contain %q any more: update the test's templating", r[0])
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	testproc.Nginx(t, bin, dir, conf, lbAddr)
	return "https://" + lbAddr
}

// lbCall posts a GraphQL request through the balancer with a forged
// X-Forwarded-For, and returns the data and the first error's code.
func lbCall(t *testing.T, base, bearer, forged, query string, vars map[string]any) (json.RawMessage, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequest(http.MethodPost, base+"/graphql", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", forged)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := lbClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Data   json.RawMessage
		Errors []struct{ Extensions struct{ Code string } }
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("HTTP %d, body not JSON: %v", res.StatusCode, err)
	}
	if len(out.Errors) > 0 {
		return out.Data, out.Errors[0].Extensions.Code
	}
	return out.Data, ""
}

// forgedLoginAddress logs in and creates a key through the balancer with a
// forged X-Forwarded-For, and returns the address the key audit recorded.
func forgedLoginAddress(t *testing.T, base string) string {
	t.Helper()
	const forged = "203.0.113.7"
	data, code := lbCall(t, base, "", forged, `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
		map[string]any{"e": procAdminEmail, "p": procAdminPassword})
	if code != "" {
		t.Fatalf("login: %s", code)
	}
	var login struct{ Login struct{ AccessToken string } }
	json.Unmarshal(data, &login)
	token := login.Login.AccessToken
	if _, code := lbCall(t, base, token, forged, `mutation{createApiKey(input:{name:"through-lb"}){apiKey{id}}}`, nil); code != "" {
		t.Fatalf("createApiKey: %s", code)
	}
	data, code = lbCall(t, base, token, forged, `{apiKeyAuditLog(first:1){nodes{action ip}}}`, nil)
	if code != "" {
		t.Fatalf("apiKeyAuditLog: %s", code)
	}
	var audit struct {
		ApiKeyAuditLog struct{ Nodes []struct{ Action, IP string } }
	}
	json.Unmarshal(data, &audit)
	if len(audit.ApiKeyAuditLog.Nodes) != 1 || audit.ApiKeyAuditLog.Nodes[0].Action != "CREATED" {
		t.Fatalf("key audit: %s", data)
	}
	return audit.ApiKeyAuditLog.Nodes[0].IP
}

// guessesBeforeThrottle sends wrong passwords through the balancer, each
// with another forged address, until one is RATE_LIMITED (at most 12), and
// returns how many were answered as wrong passwords before that.
func guessesBeforeThrottle(t *testing.T, base string) int {
	t.Helper()
	for i := range 12 {
		_, code := lbCall(t, base, "", fmt.Sprintf("198.51.100.%d", i+1), `mutation($e:String!,$p:String!){login(email:$e,password:$p){accessToken}}`,
			map[string]any{"e": procAdminEmail, "p": "not-the-password"})
		switch code {
		case "RATE_LIMITED":
			return i
		case "UNAUTHENTICATED":
		default:
			t.Fatalf("wrong password %d: code %q", i+1, code)
		}
	}
	return 12
}
