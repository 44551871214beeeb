package events_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// engines opens a fresh store of each engine (PostgreSQL when
// BTK_TEST_POSTGRES is set).
var engines = []struct {
	name string
	open func(t *testing.T) btk.Store
}{
	{"sqlite", func(t *testing.T) btk.Store { return newSQLite(t) }},
	{"postgres", func(t *testing.T) btk.Store {
		db, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}},
}

// One receiver that never answers does not stall its own workspace's other
// webhooks (docs/webhooks.md#delivery): an attack with a hanging webhook
// and an instant one saw the instant one's 12 events arrive over 70 s, and
// a retry due at once still untried minutes later, because the hanging
// webhook's 2 deliveries in flight were its workspace's whole share. Here
// the hanging receiver hangs for the whole test (its request timeout is
// longer than any wait), yet the instant receiver gets every event and a
// failed delivery's retry is made once due.
func TestHangingReceiverDoesNotStallItsWorkspace(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			h := newHarness(t, e.open(t), btk.Config{WebhookAllowPrivate: true})
			hang := newReceiver(t)
			hang.hang = make(chan struct{})
			defer close(hang.hang) // before the worker's cleanup waits for its requests
			ok := newReceiver(t)
			// flaky answers 500 to its first request, then 204.
			var flakyGot atomic.Int32
			flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if flakyGot.Add(1) == 1 {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			defer flaky.Close()
			for _, u := range []string{hang.srv.URL + "/hang", ok.srv.URL + "/ok"} {
				if _, err := h.svc.CreateWebhook(ctx, h.owner, u, []string{"api_key.created"}); err != nil {
					t.Fatal(err)
				}
			}
			runWorker(t, h.svc, events.Config{AllowPrivate: true, Timeout: 10 * time.Minute})
			const n = 12
			for i := range n {
				if _, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the instant receiver's 12 events", func() bool { return len(ok.requests()) >= n })
			if got := len(hang.requests()); got != 0 || hang.open.Load() == 0 {
				t.Fatalf("the hanging receiver answered %d and has %d requests open: it must still hang", got, hang.open.Load())
			}

			// A webhook added now fails its first attempt; its retry, due
			// 5 s later (the clock moves past it), is made while the
			// hanging receiver still holds its deliveries.
			if _, err := h.svc.CreateWebhook(ctx, h.owner, flaky.URL, []string{"api_key.revoked"}); err != nil {
				t.Fatal(err)
			}
			k, err := h.svc.CreateKey(ctx, h.owner, btk.CreateKeyInput{Name: "revoked"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.svc.RevokeKey(ctx, h.owner, k.Key.ID); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the flaky receiver's first attempt", func() bool { return flakyGot.Load() >= 1 })
			h.clock.advance(btk.WebhookBackoff(1, 1) + time.Second)
			waitFor(t, "the retry", func() bool { return flakyGot.Load() >= 2 })
			waitFor(t, "the instant receiver's 13th event", func() bool { return len(ok.requests()) >= n+1 })
			if got := len(hang.requests()); got != 0 || hang.open.Load() == 0 {
				t.Fatalf("the hanging receiver answered %d and has %d requests open: it must still hang", got, hang.open.Load())
			}
			// The flaky webhook failed, then answered: it is not failing.
			waitFor(t, "the flaky webhook's recovery to be recorded", func() bool {
				hooks, err := h.svc.Webhooks(ctx, h.owner)
				if err != nil {
					t.Fatal(err)
				}
				return hooks[2].FailingSince == nil && !hooks[2].LastAttemptAt.IsZero()
			})
			if most := hang.most.Load(); most > btk.MaxInFlightPerWebhook {
				t.Errorf("the hanging receiver had %d requests at once, want at most %d", most, btk.MaxInFlightPerWebhook)
			}
		})
	}
}
