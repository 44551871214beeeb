package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/leaktest"
)

// A leak report signed by a key of --leak-report-keys, sent to one instance
// of two (PostgreSQL + Redis), revokes the key on both at once: the very
// next request at the other instance, which had the key cached as valid, is
// refused. A replay changes nothing and answers the same labels; neither
// instance's log holds the plaintext. A canary key is refused on both
// exactly as an unknown key, and its uses are recorded once.
func TestClusterLeakReport(t *testing.T) {
	db, redisFlags := sharedCluster(t)

	signer := leaktest.NewSigner(t)
	keysFile := filepath.Join(t.TempDir(), "leak-keys.pem")
	pemText := "# id: test-github-key\n" + string(signer.PEM)
	if err := os.WriteFile(keysFile, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := startCluster(t, 2, db, append(redisFlags, "--leak-report-keys", keysFile, "--log-level", "debug")...)
	a, b := procs[0], procs[1]
	token := loginAt(t, a.url)
	k := createKeyAt(t, a.url, token, "leaky", 0)
	for _, p := range procs { // cached as valid on both
		if s, _ := p.probe(k.Plaintext); s != http.StatusOK {
			t.Fatalf("%s: the new key answers %d", p.url, s)
		}
	}

	body, _ := json.Marshal([]map[string]string{
		{"token": k.Plaintext, "type": "btk_api_key", "url": "https://github.com/o/r/blob/1/.env", "source": "content"},
		{"token": "btk_not_ours", "type": "btk_api_key", "url": "https://example.com/x", "source": "gist"},
	})
	sig := signer.Sign(body)
	report := func(base string, signature string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/leaks", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Github-Public-Key-Identifier", "test-github-key")
		req.Header.Set("Github-Public-Key-Signature", signature)
		res, err := clusterClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	if s, out := report(a.url, base64.StdEncoding.EncodeToString([]byte("forged"))); s != http.StatusUnauthorized {
		t.Fatalf("a forged signature: HTTP %d %s", s, out)
	}
	s, first := report(a.url, sig)
	if s != http.StatusOK || !strings.Contains(first, `{"token_hash":"`+leaktest.Hash(k.Plaintext)+`","token_type":"btk_api_key","label":"true_positive"}`) ||
		!strings.Contains(first, `"false_positive"`) {
		t.Fatalf("signed report: HTTP %d %s", s, first)
	}
	// At once on the other instance (and on this one).
	for _, p := range []*serveProcess{b, a} {
		if s, _ := p.probe(k.Plaintext); s != http.StatusUnauthorized {
			t.Errorf("%s: the reported key answers %d right after the report", p.url, s)
		}
	}
	// A replay, to the other instance: the same answer, nothing more audited.
	if s, again := report(b.url, sig); s != http.StatusOK || again != first {
		t.Errorf("replay: HTTP %d %s; first %s", s, again, first)
	}
	var events struct {
		AuditEvents struct{ Nodes []struct{ Action string } }
	}
	mustCall(t, b.url, token, `{auditEvents(action:"api_key.leaked"){nodes{action}}}`, nil, &events)
	if n := len(events.AuditEvents.Nodes); n != 1 {
		t.Errorf("%d api_key.leaked events after a report and its replay; want 1", n)
	}

	// A canary key: refused on both instances exactly as an unknown key.
	var created struct{ CreateApiKey struct{ PlaintextKey string } }
	mustCall(t, a.url, token, `mutation{createApiKey(input:{name:"trap",canary:true}){plaintextKey}}`, nil, &created)
	canary := created.CreateApiKey.PlaintextKey
	unknown := canary[:13] + strings.Repeat("A", 43)
	for _, p := range procs {
		ca, cerr := call(p.url, "", canary, probeQuery, nil)
		un, uerr := call(p.url, "", unknown, probeQuery, nil)
		if cerr != nil || uerr != nil || ca.status != http.StatusUnauthorized || ca.status != un.status || ca.code != un.code || string(ca.data) != string(un.data) {
			t.Errorf("%s: canary %+v %v; unknown %+v %v", p.url, ca, cerr, un, uerr)
		}
	}
	// A use is recorded apart from its request: wait (bounded) for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mustCall(t, b.url, token, `{auditEvents(action:"api_key.canary_used"){nodes{action}}}`, nil, &events)
		if len(events.AuditEvents.Nodes) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if n := len(events.AuditEvents.Nodes); n != 1 {
		t.Errorf("%d api_key.canary_used events for uses at two instances within a minute; want 1", n)
	}
	for _, p := range procs {
		if out := p.Out.String(); strings.Contains(out, k.Plaintext[13:]) || strings.Contains(out, canary[13:]) {
			t.Errorf("%s: the log holds a plaintext key", p.url)
		}
	}
}
