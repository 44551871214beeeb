package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// serve answers every request with handler and returns a client for it.
func serve(t *testing.T, token string, handler http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return New(Options{Server: srv.URL + "/", Token: token, UserAgent: "btk/test"})
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestTransportHeaders(t *testing.T) {
	for _, tc := range []struct {
		token, elevation        string
		bearer, apiKey, elevHdr string
	}{
		{"", "", "", "", ""},
		{"jwt-token", "", "Bearer jwt-token", "", ""},
		{"jwt-token", "elev", "Bearer jwt-token", "", "elev"},
		{"btk_fc25ecba_secret", "", "", "btk_fc25ecba_secret", ""},
	} {
		var got http.Header
		var path string
		c := serve(t, tc.token, func(w http.ResponseWriter, r *http.Request) {
			got, path = r.Header.Clone(), r.URL.Path
			reply(200, `{"data":{"logout":true}}`)(w, r)
		})
		if tc.elevation != "" {
			c = c.WithElevation(tc.elevation)
		}
		if _, err := Logout(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if path != "/graphql" {
			t.Errorf("path %q", path)
		}
		if got.Get("Authorization") != tc.bearer || got.Get("X-Api-Key") != tc.apiKey || got.Get("X-Elevation") != tc.elevHdr {
			t.Errorf("token %q elevation %q: Authorization %q X-Api-Key %q X-Elevation %q", tc.token, tc.elevation,
				got.Get("Authorization"), got.Get("X-Api-Key"), got.Get("X-Elevation"))
		}
		if got.Get("User-Agent") != "btk/test" || got.Get("Content-Type") != "application/json" {
			t.Errorf("User-Agent %q Content-Type %q", got.Get("User-Agent"), got.Get("Content-Type"))
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		code    btk.Code
		msg     string
		status  int
	}{
		{"field error", reply(200, `{"errors":[{"message":"name is already used","path":["createApiKey"],"extensions":{"code":"NAME_TAKEN"}}],"data":null}`),
			"NAME_TAKEN", "name is already used", 0},
		{"revoked key", reply(401, `{"errors":[{"message":"API key is revoked or expired","extensions":{"code":"UNAUTHENTICATED"}}]}`),
			"UNAUTHENTICATED", "API key is revoked or expired", 401},
		{"401 without code", reply(401, `{"errors":[{"message":"invalid API key"}]}`), "UNAUTHENTICATED", "invalid API key", 401},
		{"429", reply(429, `not json`), "RATE_LIMITED", "not json", 429},
		{"500 empty", reply(500, ``), CodeBadResponse, "server answered HTTP 500", 500},
		{"not graphql", reply(200, `<html>`), CodeBadResponse, "unexpected answer", 0},
		// Not a btk server, or --server with a path: said plainly, on one line.
		{"404", reply(404, "404 page not found\n"), CodeBadResponse, "is it a btk server, and is --server its base address", 404},
		// Something else at --server answering 200 without the data: not a
		// success with empty results (a create printed no key and exited
		// 0; a login saved an empty session).
		{"no data", reply(200, `{"data":null}`), CodeBadResponse, "no data and no errors", 0},
		{"nothing", reply(200, `{}`), CodeBadResponse, "no data and no errors", 0},
		{"too large", reply(200, `{"data":{"x":"`+strings.Repeat("A", MaxResponseBytes)+`"}}`), CodeBadResponse, "larger than 16 MiB", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Logout(context.Background(), serve(t, "tok", tc.handler))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("not an *Error: %T %v", err, err)
			}
			if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) || e.Status != tc.status || strings.Contains(e.Message, "\n") {
				t.Errorf("got code %q message %q status %d", e.Code, e.Message, e.Status)
			}
		})
	}
}

// A timeout that runs out while the answer's body arrives is the retryable
// no-answer failure (exit 8), as one before the headers is; it was an
// untyped error (exit 1), which a script takes for a permanent failure, and
// in an error answer genqlient dropped it ("server answered HTTP 500", after
// overrunning --timeout).
func TestTimeoutWhileTheBodyArrives(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, `{"data":`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}))
		t.Cleanup(srv.Close)
		c := New(Options{Server: srv.URL, Token: "tok", HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
		_, err := Logout(context.Background(), c)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeUnreachable || e.Reason != ReasonTimeout {
			t.Fatalf("HTTP %d: got %#v; want UNREACHABLE with reason %s", status, err, ReasonTimeout)
		}
	}
}

// A 429 says when to retry, from Retry-After.
func TestRetryAfter(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "42")
		reply(429, `{"errors":[{"message":"rate limit exceeded","extensions":{"code":"RATE_LIMITED"}}]}`)(w, r)
	}
	_, err := Logout(context.Background(), serve(t, "tok", h))
	var e *Error
	if !errors.As(err, &e) || e.RetryAfter != 42*time.Second || e.Message != "rate limit exceeded: retry in 42s" {
		t.Fatalf("%#v", err)
	}
}

// BaseURL drops a trailing /graphql and slashes.
func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1":           "http://h:1",
		"http://h:1/":          "http://h:1",
		"http://h:1/graphql":   "http://h:1",
		"http://h:1/graphql/":  "http://h:1",
		"https://h/x/graphql/": "https://h/x",
	} {
		if got := BaseURL(in); got != want {
			t.Errorf("BaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	_, err := Logout(context.Background(), New(Options{Server: srv.URL}))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnreachable || !strings.Contains(e.Message, srv.URL) {
		t.Errorf("got %#v", err)
	}
}

// keysServer pages through keys two at a time, as the server's cursors do.
func keysServer(t *testing.T, keys ...ApiKey) (*Client, *int) {
	requests := 0
	c := serve(t, "tok", func(w http.ResponseWriter, r *http.Request) {
		requests++
		var req struct {
			OperationName string         `json:"operationName"`
			Variables     map[string]any `json:"variables"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var data any
		switch req.OperationName {
		case "GetApiKey":
			var found *ApiKey
			for _, k := range keys {
				if k.Id == req.Variables["id"] {
					found = &k
				}
			}
			data = map[string]any{"apiKey": found}
		case "ApiKeys":
			start := 0
			if after, ok := req.Variables["after"].(string); ok {
				start = int(after[0] - '0')
			}
			end := min(start+2, len(keys))
			var cursor *string
			if end < len(keys) {
				s := string(rune('0' + end))
				cursor = &s
			}
			data = map[string]any{"apiKeys": map[string]any{
				"nodes":    keys[start:end],
				"pageInfo": map[string]any{"hasNextPage": cursor != nil, "endCursor": cursor},
			}}
		default:
			t.Errorf("unexpected %s", req.OperationName)
		}
		json.NewEncoder(w).Encode(map[string]any{"data": data})
	})
	return c, &requests
}

func TestResolveKey(t *testing.T) {
	const id1, id2, id3, id4, id5 = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222",
		"33333333-3333-4333-8333-333333333333", "44444444-4444-4444-8444-444444444444", "55555555-5555-4555-8555-555555555555"
	c, requests := keysServer(t,
		ApiKey{Id: id1, Name: "a", Status: ApiKeyStatusActive, Scopes: []string{}},
		ApiKey{Id: id2, Name: "b", Status: ApiKeyStatusExpired, Scopes: []string{}},
		ApiKey{Id: id3, Name: "c", Status: ApiKeyStatusActive, Scopes: []string{}},
		ApiKey{Id: id4, Name: "d", Status: ApiKeyStatusRevoked, Scopes: []string{}},
		ApiKey{Id: id5, Name: "e", Status: ApiKeyStatusActive, Scopes: []string{}},
	)
	ctx := context.Background()
	// A name finds a key that is not revoked: active, or expired (which
	// keeps its name until revoked).
	for ref, want := range map[string]string{"a": id1, "e": id5, "b": id2, id4: id4, id2: id2} {
		k, err := ResolveKey(ctx, c, ref)
		if err != nil || k.Id != want {
			t.Errorf("ResolveKey(%q) = %q, %v; want %q", ref, k.Id, err, want)
		}
	}
	if *requests != 1+3+1+1+1 {
		t.Errorf("%d requests: a name must follow the pages up to its key, an id needs one lookup", *requests)
	}
	for _, ref := range []string{"d", "nope", "66666666-6666-4666-8666-666666666666"} {
		_, err := ResolveKey(ctx, c, ref)
		var e *Error
		if !errors.As(err, &e) || e.Code != "NOT_FOUND" {
			t.Errorf("ResolveKey(%q): %v, want NOT_FOUND (only ids and names of keys not revoked resolve)", ref, err)
		}
	}
}

func TestIsID(t *testing.T) {
	for s, want := range map[string]bool{
		"6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21":  true,
		"6F1C8F5E-2B0E-4D8A-9A51-0C9A7C3E4B21":  true,
		"payments":                              false,
		"6f1c8f5e2b0e4d8a9a510c9a7c3e4b21":      false,
		"6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21x": false,
	} {
		if IsID(s) != want {
			t.Errorf("IsID(%q) != %v", s, want)
		}
	}
}

// Credentials are added to every request the transport sends, so a redirect
// must never be followed: it would carry the token to wherever it points.
func TestRedirectNotFollowed(t *testing.T) {
	var leaked bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = r.Header.Get("Authorization") != "" || r.Header.Get("X-Elevation") != ""
		reply(200, `{"data":{"logout":true}}`)(w, r)
	}))
	t.Cleanup(elsewhere.Close)
	c := serve(t, "jwt-token", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/graphql", http.StatusTemporaryRedirect)
	}).WithElevation("elev")
	if _, err := Logout(context.Background(), c); err == nil {
		t.Error("a redirect answered like success")
	}
	if leaked {
		t.Fatal("credentials were sent to the redirect target")
	}
}

// An answer other than 200 is read up to MaxErrorResponseBytes, counted
// after gzip is undone: genqlient reads such a body whole, and a hostile
// server's 1 MiB of gzip that inflated to 1 GiB held 3.8 GB in btk.
func TestErrorAnswerBounded(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zero := make([]byte, 1<<20)
	for range 64 { // 64 MiB inflated, 64 KiB sent
		zw.Write(zero)
	}
	zw.Close()
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"gzip bomb", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusBadGateway)
			w.Write(zipped.Bytes())
		}},
		{"plain", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			for range 64 {
				if _, err := w.Write(zero); err != nil {
					return
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, "tok", tc.handler)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Logout(context.Background(), c)
			runtime.ReadMemStats(&after)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeBadResponse || !strings.Contains(e.Message, "larger than 1 MiB") {
				t.Fatalf("got %#v; want BAD_RESPONSE, larger than 1 MiB", err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
				t.Errorf("allocated %d MiB reading a 64 MiB answer", n>>20)
			}
		})
	}
	// A btk error answer under the bound is read as before.
	_, err := Logout(context.Background(), serve(t, "tok", reply(503, `{"errors":[{"message":"busy","extensions":{"code":"UNAVAILABLE"}}]}`)))
	if e := (*Error)(nil); !errors.As(err, &e) || e.Code != btk.CodeUnavailable || e.Message != "busy" {
		t.Fatalf("503 from btk: %#v", err)
	}
}

// A password in --server is not repeated in messages.
func TestServerPasswordNotInMessages(t *testing.T) {
	srv := httptest.NewServer(reply(404, "404 page not found\n"))
	t.Cleanup(srv.Close)
	withPassword := strings.Replace(srv.URL, "http://", "http://alice:S3cretPass@", 1)
	_, err := Logout(context.Background(), New(Options{Server: withPassword, Token: "tok"}))
	if err == nil || strings.Contains(err.Error(), "S3cretPass") || !strings.Contains(err.Error(), "alice:xxxxx@") {
		t.Errorf("404: %v", err)
	}
	srv.Close()
	_, err = Logout(context.Background(), New(Options{Server: withPassword, Token: "tok"}))
	if err == nil || strings.Contains(err.Error(), "S3cretPass") {
		t.Errorf("unreachable: %v", err)
	}
}
