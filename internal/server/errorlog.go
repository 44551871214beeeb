package server

import (
	"bytes"
	"context"
	stdlog "log"
	"log/slog"

	"github.com/btk-project/btk/internal/btk"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrorLog is the ErrorLog of every btk listener's http.Server: net/http's
// messages go to log at WARN, but those a client causes at will on its own
// connection — a failed TLS handshake, junk instead of the HTTP/2 preface,
// an HTTP/2 protocol error — go to DEBUG and are counted in m (nil: not
// counted; docs/operating.md#metrics). One client sending junk in a loop
// wrote 28,000 WARN lines (4.8 MB) in 10 s. A key in a message (a panic's)
// is redacted.
func ErrorLog(log *slog.Logger, m *Metrics) *stdlog.Logger {
	w := &errorLogWriter{log: log}
	if m != nil {
		w.counters = [...]prometheus.Counter{noiseTLS: m.tlsHandshakeErrors, noiseHTTP2: m.http2ClientErrors}
	}
	return stdlog.New(w, "", 0)
}

// The counters of client noise.
const (
	noiseTLS = iota
	noiseHTTP2
)

// clientNoise are the beginnings of net/http's per-connection messages that
// a client alone causes (Go 1.26's wording), each with its counter. Anything
// else (a panic, an Accept error, a handler's misuse of the ResponseWriter)
// is a fault of the server's and stays at WARN.
var clientNoise = []struct {
	prefix []byte
	kind   int
}{
	{[]byte("http: TLS handshake error from "), noiseTLS},
	{[]byte("http2: server: error reading preface from client "), noiseHTTP2},
	{[]byte("http2: server connection error from "), noiseHTTP2},
	{[]byte("timeout waiting for SETTINGS frames from "), noiseHTTP2},
	{[]byte("http2: received GOAWAY "), noiseHTTP2}, // logged only with an error code
}

type errorLogWriter struct {
	log      *slog.Logger
	counters [2]prometheus.Counter // nil without metrics
}

func (w *errorLogWriter) Write(p []byte) (int, error) {
	level := slog.LevelWarn
	for _, n := range clientNoise {
		if bytes.HasPrefix(p, n.prefix) {
			level = slog.LevelDebug
			if c := w.counters[n.kind]; c != nil {
				c.Inc()
			}
			break
		}
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, btk.RedactKeys(string(bytes.TrimSuffix(p, []byte("\n")))))
	}
	return len(p), nil
}
