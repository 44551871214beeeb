package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

type rowReadsKey struct {
	ID                string
	LastUsedIp        *string
	LastUsedUserAgent *string
	Usage             []struct{ Accepted int }
}

// A key's lastUsedIp, lastUsedUserAgent and usage are read for a whole list
// of keys at once: one statement for the list's last clients, one for its
// series of a range, whatever the number of rows (an ADMIN's six aliases of
// apiKeys(first: 500) asking for the last client were 6,000 read
// transactions, about 0.5 s of CPU; docs/security.md#bounds-on-a-request).
// Unasked, they are not read; every list of keys in an answer (a page, the
// top keys, one key, a mutation's key) reads them the same way.
func TestKeyRowReadsBatched(t *testing.T) {
	t.Parallel()
	e, cs := newCountingEnv(t)
	owner := e.admin()
	adminID := e.createAccount(owner, "keyadmin@example.com", "keyadmin-password-1", false)
	e.setMember(owner, e.adminWS, adminID, "ADMIN")
	admin := cred{Bearer: e.login("keyadmin@example.com", "keyadmin-password-1", e.adminWS)}
	const n, used = 40, 25
	ids := map[string]int{}
	for i := range n {
		k := e.createKey(owner, fmt.Sprintf("k%02d", i))
		ids[k.ID] = i
		if i < used {
			r := e.do(cred{Key: k.Plaintext, Header: map[string]string{"User-Agent": fmt.Sprintf("client/%d", i)}}, probe, nil)
			if r.Status != 200 {
				t.Fatalf("key %d: HTTP %d", i, r.Status)
			}
		}
	}
	e.flush()

	// reads runs query as the ADMIN and returns the read transactions it
	// made, the counts in cs.
	reads := func(query string, v any) int64 {
		t.Helper()
		cs.reset()
		e.must(admin, query, nil, v)
		return cs.readCalls.Load()
	}
	const pages = 3
	plain := reads(aliasQuery(pages, fmt.Sprintf("apiKeys(first:%d){nodes{id}}", n)), &struct{}{})
	if cs.clients.Load()+cs.client.Load()+cs.keysSeries.Load()+cs.series.Load() != 0 {
		t.Errorf("keys without lastUsedIp or usage: %d client and %d series reads", cs.clients.Load()+cs.client.Load(), cs.keysSeries.Load()+cs.series.Load())
	}
	var out map[string]struct{ Nodes []rowReadsKey }
	full := reads(aliasQuery(pages, fmt.Sprintf("apiKeys(first:%d){nodes{id lastUsedIp lastUsedUserAgent usage{accepted}}}", n)), &out)
	if c, s := cs.clients.Load(), cs.keysSeries.Load(); c != pages || s != pages || cs.client.Load() != 0 || cs.series.Load() != 0 || full-plain != 2*pages {
		t.Errorf("%d pages of %d keys: %d list and %d single client reads, %d list and %d single series reads, %d more transactions; want %d, 0, %d, 0, %d",
			pages, n, c, cs.client.Load(), s, cs.series.Load(), full-plain, pages, pages, 2*pages)
	}
	if len(out) != pages {
		t.Fatalf("%d pages answered", len(out))
	}
	for alias, page := range out {
		if len(page.Nodes) != n {
			t.Fatalf("%s: %d keys", alias, len(page.Nodes))
		}
		for _, k := range page.Nodes {
			checkRowReads(t, k, ids[k.ID], used)
		}
	}

	// Aliases and fragments under nodes, and the other lists of keys.
	for _, c := range []struct {
		name, query string
		lists       int64
	}{
		{"aliased nodes", `{apiKeys(first:40){a:nodes{id} b:nodes{id lastUsedIp usage{accepted}}}}`, 1},
		{"fragment", `{apiKeys(first:40){nodes{...K}}} fragment K on ApiKey{id lastUsedIp usage{accepted}}`, 1},
		{"top keys", `{workspaceUsage{topKeys(first:40){apiKey{id lastUsedIp lastUsedUserAgent usage{accepted}}}}}`, 1},
	} {
		var out json.RawMessage
		reads(c.query, &out)
		if cs.clients.Load() != c.lists || cs.keysSeries.Load() != c.lists || cs.client.Load() != 0 {
			t.Errorf("%s: %d list and %d single client reads, %d list series reads; want %d, 0, %d",
				c.name, cs.clients.Load(), cs.client.Load(), cs.keysSeries.Load(), c.lists, c.lists)
		}
		if !strings.Contains(string(out), `"lastUsedIp":"127.0.0.1"`) {
			t.Errorf("%s: no last client in %.300s", c.name, out)
		}
	}
	var top struct {
		WorkspaceUsage struct {
			TopKeys []struct{ ApiKey rowReadsKey }
		}
	}
	reads(`{workspaceUsage{topKeys(first:40){apiKey{id lastUsedIp lastUsedUserAgent usage{accepted}}}}}`, &top)
	if len(top.WorkspaceUsage.TopKeys) != used {
		t.Fatalf("%d top keys, want %d", len(top.WorkspaceUsage.TopKeys), used)
	}
	for _, k := range top.WorkspaceUsage.TopKeys {
		checkRowReads(t, k.ApiKey, ids[k.ApiKey.ID], used)
	}

	// One key, by id: one read of each.
	var first rowReadsKey
	for id, i := range ids {
		if i == 0 {
			first.ID = id
		}
	}
	var one struct{ ApiKey rowReadsKey }
	cs.reset()
	e.must(admin, `query($id:ID!){apiKey(id:$id){id lastUsedIp lastUsedUserAgent usage{accepted}}}`, map[string]any{"id": first.ID}, &one)
	if cs.clients.Load() != 1 || cs.keysSeries.Load() != 1 || cs.client.Load()+cs.series.Load() != 0 {
		t.Errorf("one key: %d client and %d series reads", cs.clients.Load()+cs.client.Load(), cs.keysSeries.Load()+cs.series.Load())
	}
	checkRowReads(t, one.ApiKey, 0, used)

	// A mutation's key: never used.
	var created struct {
		CreateApiKey struct{ ApiKey rowReadsKey }
	}
	e.must(owner, `mutation{createApiKey(input:{name:"fresh"}){apiKey{id lastUsedIp lastUsedUserAgent usage{accepted}}}}`, nil, &created)
	checkRowReads(t, created.CreateApiKey.ApiKey, n, used)
}

// checkRowReads checks the last client and usage of key i of the test: the
// first used keys were used once, by client/i from 127.0.0.1.
func checkRowReads(t *testing.T, k rowReadsKey, i, used int) {
	t.Helper()
	if len(k.Usage) != 8 { // a week of days, both ends included
		t.Fatalf("key %d: %d usage points", i, len(k.Usage))
	}
	total := 0
	for _, p := range k.Usage {
		total += p.Accepted
	}
	if i < used {
		if k.LastUsedIp == nil || *k.LastUsedIp != "127.0.0.1" || k.LastUsedUserAgent == nil || *k.LastUsedUserAgent != fmt.Sprintf("client/%d", i) || total != 1 {
			t.Errorf("used key %d: ip %v, agent %v, %d uses", i, deref(k.LastUsedIp), deref(k.LastUsedUserAgent), total)
		}
	} else if k.LastUsedIp != nil || k.LastUsedUserAgent != nil || total != 0 {
		t.Errorf("unused key %d: ip %v, agent %v, %d uses", i, deref(k.LastUsedIp), deref(k.LastUsedUserAgent), total)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// failingClients is a store whose reads of last clients fail.
type failingClients struct{ btk.Store }

func (s failingClients) Read(ctx context.Context, fn func(btk.Tx) error) error {
	return s.Store.Read(ctx, func(tx btk.Tx) error { return fn(failingClientsTx{tx}) })
}

type failingClientsTx struct{ btk.Tx }

func (failingClientsTx) KeyClients(context.Context, string, []string) ([]btk.KeyClient, error) {
	return nil, errors.New("SELECT c.api_key_id FROM api_key_clients: disk I/O error")
}

// A list whose last clients cannot be read answers its keys, without their
// last client, and one error: internal, its detail in the log only.
func TestKeyClientsFailureIsInternal(t *testing.T) {
	t.Parallel()
	e := newWrappedEnv(t, func(s btk.Store) btk.Store { return failingClients{s} })
	owner := e.admin()
	e.createKey(owner, "k")
	r := e.do(owner, `{apiKeys{nodes{name lastUsedIp}}}`, nil)
	var out struct {
		ApiKeys struct{ Nodes []struct{ Name string } }
	}
	if err := json.Unmarshal(r.Data, &out); err != nil || len(out.ApiKeys.Nodes) != 1 || out.ApiKeys.Nodes[0].Name != "k" {
		t.Fatalf("keys not answered: %s %v", r.Data, err)
	}
	if len(r.Errors) != 1 || r.Code() != "INTERNAL" || r.Errors[0].Message != "internal error" {
		t.Fatalf("errors %+v; want one INTERNAL", r.Errors)
	}
	if !strings.Contains(e.logText(), "disk I/O error") {
		t.Errorf("the failure is not in the log:\n%s", e.logText())
	}
}
