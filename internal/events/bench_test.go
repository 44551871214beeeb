package events_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
)

// BenchmarkCreateKeyHangingReceiver compares createApiKey (the service
// call the GraphQL mutation makes) with no webhook, with a webhook whose
// receiver answers at once, and with one whose receiver never answers (its
// deliveries under way, every worker busy): the mutation only writes the
// outbox rows, and the worker's pool waits alone. Compare the ns/op of one
// run (docs/webhooks.md).
func BenchmarkCreateKeyHangingReceiver(b *testing.B) {
	for _, name := range []string{"no-webhook", "answering-receiver", "hanging-receiver"} {
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, newSQLite(b), btk.Config{WebhookAllowPrivate: true})
			if name == "answering-receiver" {
				rcv := newReceiver(b)
				if _, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, nil); err != nil {
					b.Fatal(err)
				}
				runWorker(b, h.svc, events.Config{AllowPrivate: true, Workers: 8})
			}
			if name == "hanging-receiver" {
				rcv := newReceiver(b)
				rcv.hang = make(chan struct{})
				if _, err := h.svc.CreateWebhook(ctx, h.owner, rcv.srv.URL, nil); err != nil {
					b.Fatal(err)
				}
				runWorker(b, h.svc, events.Config{AllowPrivate: true, Workers: 8, Timeout: time.Minute})
				b.Cleanup(func() { close(rcv.hang) }) // before the worker's cleanup waits for its deliveries
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
