package gateway

import (
	"errors"
	"io"
	"net/http"

	"golang.org/x/sync/semaphore"
)

// BodyBudget bounds the bytes the request bodies being read hold together,
// counted as they arrive (docs/security.md): past it a request is answered
// 503 with Retry-After (Busy) instead of read further. Bytes, not bodies:
// a count of bodies is held by clients that announce large ones and send a
// byte a second; to hold these bytes a client must send them. The first
// free bytes of each body are not counted (each client address's share of
// requests in flight bounds them), so that stalled large bodies do not
// refuse the small ones real clients send.
type BodyBudget struct {
	held *semaphore.Weighted
	free int64
	busy error
}

// NewBodyBudget returns a budget of total bytes, free of them not counted
// for each body; busy is the error past it (code UNAVAILABLE).
func NewBodyBudget(total, free int64, busy error) *BodyBudget {
	return &BodyBudget{held: semaphore.NewWeighted(total), free: free, busy: busy}
}

// Read reads r's body whole, at most limit bytes (an *http.MaxBytesError
// past them), into buf (nil, or a pooled buffer of at most the budget's
// free bytes), grown as the bytes arrive: its bytes past the free ones are
// counted in b before each growth, and past b's total Read returns b's busy
// error. It returns the bytes counted, which the caller gives back
// (Release) once done with the body, also after an error.
func (b *BodyBudget) Read(w http.ResponseWriter, r *http.Request, limit int64, buf []byte) (body []byte, held int64, err error) {
	src := http.MaxBytesReader(w, r.Body, limit)
	body = buf[:0]
	for {
		if len(body) == cap(body) { // the client sent as much as the buffer holds
			size := min(max(2*int64(cap(body)), 512), limit+1) // +1: the read that sees the end
			if more := max(size-b.free, 0) - held; more > 0 {
				if !b.held.TryAcquire(more) {
					return nil, held, b.busy
				}
				held += more
			}
			grown := make([]byte, len(body), size)
			copy(grown, body)
			body = grown
		}
		n, err := src.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, held, nil
		}
		if err != nil {
			return nil, held, err
		}
	}
}

// Release gives back the bytes Read counted.
func (b *BodyBudget) Release(held int64) {
	if held > 0 {
		b.held.Release(held)
	}
}

// Busy answers 503 with Retry-After: 1 a request refused for the load it
// would add (err: code UNAVAILABLE), without reading the rest of its body:
// over HTTP/1.1 the connection is closed (net/http would read the body
// before answering, for as long as the client takes to send it on a
// listener without a read timeout); over HTTP/2 the request's stream ends,
// not the connection, whose other requests were not refused.
func Busy(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Retry-After", "1")
	unread := r.Body != nil && r.Body != http.NoBody
	if unread && r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	Fail(w, err)
	if unread {
		dropUnreadBody(w)
	}
}
