// Package client is the btk GraphQL client: genqlient operations generated
// from schema.graphql (see *.graphql beside this file), an HTTP transport that
// carries the caller's credentials, and errors typed by what went wrong so the
// command line can map them to exit codes.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
)

// Options configure a Client.
type Options struct {
	// Server is the base address of the btk server, for example
	// http://127.0.0.1:8080; the GraphQL endpoint is Server + "/graphql".
	Server string
	// Token is a session token (sent as Authorization: Bearer) or a workspace
	// API key (btk_..., sent as X-Api-Key). Empty sends no credential.
	Token string
	// UserAgent is sent as User-Agent, for example "btk/1.2.3".
	UserAgent string
	// HTTPClient is used for requests; nil means a client with a 30 s timeout.
	// Its Transport is wrapped, not replaced.
	HTTPClient *http.Client
}

// Client is a graphql.Client for one btk server. Every error it returns is
// an *Error.
type Client struct {
	server string
	shown  string // server, without a password, for messages
	http   *http.Client
	gql    graphql.Client
}

// New returns a client for opts.Server.
func New(opts Options) *Client {
	base := opts.HTTPClient
	if base == nil {
		base = &http.Client{Timeout: 30 * time.Second}
	}
	hc := *base
	// The transport adds credentials to every request it sends, so a
	// redirect (perhaps to another host) must not be followed.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Transport = &Transport{
		Token:     opts.Token,
		UserAgent: opts.UserAgent,
		Base:      base.Transport,
	}
	server := BaseURL(opts.Server)
	return &Client{
		server: server,
		shown:  RedactedURL(server),
		http:   &hc,
		gql:    graphql.NewClient(server+"/graphql", &hc),
	}
}

// BaseURL is the server's base address as given, less a trailing slash and
// a trailing /graphql (the endpoint's address is a common thing to paste).
func BaseURL(server string) string {
	server = strings.TrimRight(server, "/")
	return strings.TrimRight(strings.TrimSuffix(server, "/graphql"), "/")
}

// WithElevation returns a copy of c that sends token as X-Elevation, as
// rotateApiKey requires.
func (c *Client) WithElevation(token string) *Client {
	hc := *c.http
	t := *hc.Transport.(*Transport)
	t.Elevation = token
	hc.Transport = &t
	return &Client{server: c.server, shown: c.shown, http: &hc, gql: graphql.NewClient(c.server+"/graphql", &hc)}
}

// MakeRequest implements graphql.Client; a failure is returned as an *Error.
func (c *Client) MakeRequest(ctx context.Context, req *graphql.Request, resp *graphql.Response) error {
	last := &lastResponse{}
	ctx = context.WithValue(ctx, lastResponseKey{}, last)
	err := c.gql.MakeRequest(ctx, req, resp)
	if n, ok := ctx.Value(answerBytesKey{}).(*int64); ok {
		*n += last.size
	}
	if last.bad != "" && (err == nil || last.tooLarge) {
		// Something at --server answered 200 without the data asked for (a
		// proxy, a portal, another GraphQL service): not a success with
		// empty results, which a script would take for real. Or it sent
		// more than any btk answer.
		return &Error{Code: CodeBadResponse, Message: fmt.Sprintf("unexpected answer from %s: %s", c.shown, last.bad)}
	}
	return toError(err, c.shown, last)
}

// RedactedURL is the server's address for messages: without a password, should
// --server hold one (http://user:password@host).
func RedactedURL(server string) string {
	if u, err := url.Parse(server); err == nil && u.User != nil {
		return u.Redacted()
	}
	return server
}

// MaxResponseBytes bounds an answer the client reads: far above any btk
// answer (a page of 500 keys is about 250 KB).
const MaxResponseBytes = 16 << 20

// MaxErrorResponseBytes bounds an answer other than 200 the client reads:
// btk's own are under 64 KiB; a proxy's error page is a few KiB.
const MaxErrorResponseBytes = 1 << 20

// readError reads an answer other than 200 (at most MaxErrorResponseBytes,
// counted after any gzip is undone, so a small compressed answer cannot
// grow without bound) before genqlient does, which would read it whole and
// drop a failure to read it (a timeout). An answer too large is noted in
// last and passed on empty.
func (last *lastResponse) readError(body io.ReadCloser) (io.ReadCloser, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, MaxErrorResponseBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxErrorResponseBytes {
		last.bad = fmt.Sprintf("an answer larger than %d MiB", MaxErrorResponseBytes>>20)
		last.tooLarge = true
		b = nil
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Ping checks that the server answers HTTP at all (GET /healthz): any
// status will do. It fails, as an *Error with CodeUnreachable, when there
// is no answer — so that a command can say so before asking for a
// password.
func (c *Client) Ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+"/healthz", nil)
	if err != nil {
		return toError(err, c.shown, nil)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return toError(err, c.shown, nil)
	}
	_ = resp.Body.Close()
	return nil
}

// lastResponse keeps what the error of a request needs from its HTTP
// response and genqlient does not pass on: the Retry-After header, and
// why a 200 answer is not a GraphQL result (bad).
type lastResponse struct {
	retryAfter string
	bad        string
	tooLarge   bool  // an answer other than 200 was over MaxErrorResponseBytes
	size       int64 // the bytes of a 200 answer read
}

// answerBytesKey, in a call's context, holds an *int64 to which the client
// adds the size of every 200 answer it reads (countAnswers): what following
// pages measures the nodes it keeps by.
type answerBytesKey struct{}

// countAnswers returns ctx, whose calls through a Client add the size of
// their answers to *n.
func countAnswers(ctx context.Context, n *int64) context.Context {
	return context.WithValue(ctx, answerBytesKey{}, n)
}

// check reads a 200 answer's body (at most MaxResponseBytes) and notes in
// last what is wrong with it: no data and no errors, or too large. It
// returns the body to decode.
func (last *lastResponse) check(body io.ReadCloser) io.ReadCloser {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, MaxResponseBytes+1))
	last.size = int64(len(b))
	switch {
	case err != nil:
		return io.NopCloser(errReader{err})
	case len(b) > MaxResponseBytes:
		// Decoded as {}: no error of its own, so bad is what is told.
		last.bad = fmt.Sprintf("an answer larger than %d MiB", MaxResponseBytes>>20)
		return io.NopCloser(strings.NewReader("{}"))
	}
	var doc struct {
		Data   json.RawMessage `json:"data"`
		Errors json.RawMessage `json:"errors"`
	}
	if json.Unmarshal(b, &doc) == nil && noJSON(doc.Errors) && noJSON(doc.Data) {
		last.bad = "no data and no errors"
	}
	return io.NopCloser(bytes.NewReader(b))
}

// noJSON reports whether a field was absent, null or an empty list.
func noJSON(v json.RawMessage) bool {
	s := strings.TrimSpace(string(v))
	return s == "" || s == "null" || s == "[]"
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type lastResponseKey struct{}

// Transport adds btk's credentials and User-Agent to every request.
type Transport struct {
	Token     string // session token (Bearer) or API key (btk_..., X-Api-Key)
	Elevation string // X-Elevation, when set
	UserAgent string
	Base      http.RoundTripper // nil means http.DefaultTransport
}

// IsAPIKey reports whether token is a workspace API key (btk_...) rather
// than a session token.
func IsAPIKey(token string) bool { return strings.HasPrefix(token, "btk_") }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	switch {
	case t.Token == "":
	case IsAPIKey(t.Token):
		r.Header.Set("X-Api-Key", t.Token)
	default:
		r.Header.Set("Authorization", "Bearer "+t.Token)
	}
	if t.Elevation != "" {
		r.Header.Set("X-Elevation", t.Elevation)
	}
	if t.UserAgent != "" {
		r.Header.Set("User-Agent", t.UserAgent)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if last, ok := req.Context().Value(lastResponseKey{}).(*lastResponse); ok && resp != nil {
		last.retryAfter = resp.Header.Get("Retry-After")
		if resp.StatusCode == http.StatusOK {
			resp.Body = last.check(resp.Body)
		} else if resp.Body, err = last.readError(resp.Body); err != nil {
			return nil, err
		}
	}
	return resp, err
}
