package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// pagedServer answers every list operation with pages of its making: page n
// (from 1, counted by requests) holds nodes(n) nodes and ends with cursor(n),
// "" for the last page. pad adds that many bytes to each answer in a field
// the client does not decode. Pages after last end the list, so that a
// client without bounds ends too (and a test fails on the count, not on a
// deadline). It returns the client and the number of requests.
func pagedServer(t *testing.T, last int, nodes func(n int) int, cursor func(n int) string, pad int) (*Client, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	node := map[string]string{
		"ApiKeys": `{"id":"6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21","name":"ci","displayPrefix":"btk_fc25ecba","hint":"HCe4",` +
			`"status":"REVOKED","scopes":[],"allowedCidrs":[],"createdAt":"2026-11-21T22:00:00Z"}`,
		"ApiKeyAuditLog":    `{"id":"1","action":"CREATED","createdAt":"2026-11-21T22:00:00Z"}`,
		"AuditEvents":       `{"id":"1","action":"login","createdAt":"2026-11-21T22:00:00Z"}`,
		"WebhookDeliveries": `{"id":"1","status":"DELIVERED","createdAt":"2026-11-21T22:00:00Z"}`,
	}
	field := map[string]string{"ApiKeys": "apiKeys", "ApiKeyAuditLog": "apiKeyAuditLog", "AuditEvents": "auditEvents", "WebhookDeliveries": "webhookDeliveries"}
	padding := strings.Repeat("A", pad)
	c := serve(t, "tok", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			OperationName string `json:"operationName"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || node[req.OperationName] == "" {
			t.Errorf("unexpected request %q: %v", req.OperationName, err)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		n := int(requests.Add(1))
		next := "null"
		if cur := cursor(n); cur != "" && n < last {
			next = `"` + cur + `"`
		}
		var b strings.Builder
		fmt.Fprintf(&b, `{"pad":"%s","data":{"%s":{"nodes":[`, padding, field[req.OperationName])
		for i := range nodes(n) {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(node[req.OperationName])
		}
		fmt.Fprintf(&b, `],"pageInfo":{"hasNextPage":%t,"endCursor":%s}}}}`, next != "null", next)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, b.String())
	})
	return c, &requests
}

// lists are the client's functions that follow pages, each as a command
// calls it.
var lists = map[string]func(context.Context, *Client) error{
	"AllApiKeys": func(ctx context.Context, c *Client) error { _, err := AllApiKeys(ctx, c, true); return err },
	"EachApiKey": func(ctx context.Context, c *Client) error {
		return EachApiKey(ctx, c, true, func([]ApiKey) error { return nil })
	},
	"ResolveKey":         func(ctx context.Context, c *Client) error { _, err := ResolveKey(ctx, c, "nope"); return err },
	"ResolveKeyForAudit": func(ctx context.Context, c *Client) error { _, err := ResolveKeyForAudit(ctx, c, "nope"); return err },
	"AuditLog": func(ctx context.Context, c *Client) error {
		_, _, _, err := AuditLog(ctx, c, AuditFilter{}, MaxKeptNodes)
		return err
	},
	"EventLog": func(ctx context.Context, c *Client) error {
		_, _, err := EventLog(ctx, c, AuditFilter{}, MaxKeptNodes)
		return err
	},
	"DeliveryLog": func(ctx context.Context, c *Client) error {
		_, _, err := DeliveryLog(ctx, c, "1", MaxKeptNodes)
		return err
	},
}

func wantCode(t *testing.T, err error, code btk.Code, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code || !strings.Contains(e.Message, msg) {
		t.Errorf("got %v; want %s: ...%s...", err, code, msg)
	}
}

// A server whose pages never end (a page that holds nothing says another
// follows, or a cursor comes back) made the client ask for ever: every
// list stops at once with BAD_RESPONSE.
func TestPagesThatRepeatRefused(t *testing.T) {
	ctx := context.Background()
	for name, list := range lists {
		t.Run(name+"/empty", func(t *testing.T) {
			c, requests := pagedServer(t, 1000, func(int) int { return 0 }, func(n int) string { return fmt.Sprint(n) }, 0)
			wantCode(t, list(ctx, c), CodeBadResponse, "page 1 holds nothing but says another follows")
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
		t.Run(name+"/cursor", func(t *testing.T) {
			// Cursors a, b, a: page 3 leads back to page 2.
			c, requests := pagedServer(t, 1000, func(int) int { return 1 }, func(n int) string { return string(rune('a' + (n+1)%2)) }, 0)
			wantCode(t, list(ctx, c), CodeBadResponse, "page 3 says the next page is one already read")
			if n := requests.Load(); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
		})
	}
}

// A server whose pages go on, each a full answer, made the client keep
// every key: 2.13 GB in 32 s. What a command keeps is at most MaxKeptNodes
// nodes; a list of keys not revoked is never longer (a workspace holds no
// more); a list a command goes through a page at a time keeps one page.
func TestPagesKeptBounded(t *testing.T) {
	ctx := context.Background()
	const perPage, last = 5000, 25 // 125,000 keys, if nothing stopped sooner
	wantPages := int64(MaxKeptNodes/perPage + 1)
	endless := func(t *testing.T) (*Client, *atomic.Int64) {
		return pagedServer(t, last, func(int) int { return perPage }, func(n int) string { return fmt.Sprint(n) }, 0)
	}
	t.Run("AllApiKeys", func(t *testing.T) {
		c, requests := endless(t)
		keys, err := AllApiKeys(ctx, c, true)
		wantCode(t, err, CodeTooLarge, "more than 100000 keys to hold in memory")
		if n := requests.Load(); n != wantPages || keys != nil {
			t.Errorf("%d requests and %d keys kept; want %d requests and none", n, len(keys), wantPages)
		}
	})
	t.Run("EachApiKey/not revoked", func(t *testing.T) {
		c, requests := endless(t)
		wantCode(t, EachApiKey(ctx, c, false, func([]ApiKey) error { return nil }), CodeBadResponse, "more than 100000 keys not revoked")
		if n := requests.Load(); n != wantPages {
			t.Errorf("%d requests, want %d", n, wantPages)
		}
	})
	t.Run("ResolveKey", func(t *testing.T) {
		c, requests := endless(t)
		_, err := ResolveKey(ctx, c, "nope")
		wantCode(t, err, CodeBadResponse, "more than 100000 keys not revoked")
		if n := requests.Load(); n != wantPages {
			t.Errorf("%d requests, want %d", n, wantPages)
		}
	})
	t.Run("EachApiKey/all", func(t *testing.T) {
		// Revoked keys have no bound but MaxListedKeys: every page is
		// handed on, one at a time.
		c, requests := endless(t)
		pages, most := 0, 0
		err := EachApiKey(ctx, c, true, func(keys []ApiKey) error {
			pages++
			most = max(most, len(keys))
			return nil
		})
		if err != nil || pages != last || most != perPage || requests.Load() != last {
			t.Errorf("%v after %d pages of at most %d keys; want all %d pages of %d", err, pages, most, last, perPage)
		}
	})
}

// Each answer may be 16 MiB: MaxKeptNodes of them would be far too much.
// What a command keeps is bounded by the bytes of its answers too.
func TestPagesKeptBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const pad = 4 << 20
	c, requests := pagedServer(t, 100, func(int) int { return 1 }, func(n int) string { return fmt.Sprint(n) }, pad)
	_, err := AllApiKeys(ctx, c, true)
	wantCode(t, err, CodeTooLarge, "more than 128 MiB of answers to hold in memory")
	if n := requests.Load(); n != MaxKeptBytes/pad { // the page that passes it, with its node
		t.Errorf("%d requests, want %d", n, MaxKeptBytes/pad)
	}
	_, _, err = EventLog(ctx, c, AuditFilter{}, MaxKeptNodes)
	wantCode(t, err, CodeTooLarge, "more than 128 MiB of answers to hold in memory")
}

// A list gone through a page at a time keeps nothing, but its pages are
// bounded too: MaxPages.
func TestPagesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("40,000 requests")
	}
	c, requests := pagedServer(t, 2*MaxPages, func(int) int { return 1 }, func(n int) string { return fmt.Sprint(n) }, 0)
	err := EachApiKey(context.Background(), c, true, func([]ApiKey) error { return nil })
	wantCode(t, err, CodeBadResponse, fmt.Sprintf("more than %d pages", MaxPages))
	if n := requests.Load(); n != MaxPages {
		t.Errorf("%d requests, want %d", n, MaxPages)
	}
}
