package events_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
)

// BenchmarkCreateKeyHangingReceiver compares createApiKey (the service
// call the GraphQL mutation makes) with no webhook against the same with a
// webhook whose receiver never answers, its deliveries under way: the
// mutation only writes the outbox rows, and the worker's pool waits alone.
// Compare the two ns/op of one run (docs/webhooks.md).
func BenchmarkCreateKeyHangingReceiver(b *testing.B) {
	for _, hanging := range []bool{false, true} {
		name := "no-webhook"
		if hanging {
			name = "hanging-receiver"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, newSQLite(b), btk.Config{WebhookAllowPrivate: true})
			if hanging {
				rcv := newReceiver(b)
				rcv.hang = make(chan struct{})
				b.Cleanup(func() { close(rcv.hang) })
				if _, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, nil); err != nil {
					b.Fatal(err)
				}
				runWorker(b, h.svc, events.Config{AllowPrivate: true, Workers: 8, Timeout: time.Minute})
				// The pool is busy with the hanging receiver before timing starts.
				for i := range 8 {
					if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "warm" + strconv.Itoa(i)}); err != nil {
						b.Fatal(err)
					}
				}
				waitFor(b, "the pool to hang", func() bool { return rcv.open.Load() == 8 })
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
