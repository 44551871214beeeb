package events_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/events"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
)

// Three instances on one PostgreSQL database, each with its own pool,
// service and delivery worker, deliver 1,000 events with no duplicate and
// none missing.
func TestThreeInstancesDeliverOnce(t *testing.T) {
	url := pgtest.URL(t) // skips without BTK_TEST_POSTGRES
	var svcs []*btk.Service
	var owner *btk.Actor
	for i := range 3 {
		db, err := postgres.Open(ctx, url, postgres.Options{Shared: true, MaxConns: 6})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		h := newHarness(t, db, btk.Config{WebhookAllowPrivate: true})
		if i == 0 {
			owner = h.owner
		}
		svcs = append(svcs, h.svc)
	}
	rcv := newReceiver(t)
	hook, err := svcs[0].CreateWebhook(ctx, owner, rcv.srv.URL, []string{"api_key.created"})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs {
		runWorker(t, svc, events.Config{AllowPrivate: true, Workers: 4})
	}
	// 1,000 events written from all three instances while they deliver.
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			for j := range 100 {
				if _, err := svcs[i%3].CreateKey(ctx, owner, btk.CreateKeyInput{Name: "k" + strconv.Itoa(i*100+j)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "1,000 deliveries", func() bool { return pending(t, svcs[0]) == 0 })
	ids := map[string]int{}
	for _, r := range rcv.requests() {
		if !verify(hook.Secret, r) {
			t.Fatalf("request %s does not verify", r.id)
		}
		ids[r.id]++
	}
	if len(ids) != 1000 {
		t.Errorf("%d distinct events arrived, want 1000", len(ids))
	}
	dups := 0
	for _, n := range ids {
		if n > 1 {
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("%d events arrived more than once", dups)
	}
	// The chain stayed linear under the three instances' writers: the
	// bootstrap's two rows (workspace.created, membership.changed), the
	// webhook's and the 1,000 keys'.
	admin := &btk.Actor{AccountID: owner.AccountID, PlatformAdmin: true}
	res, err := svcs[2].VerifyAuditChain(ctx, admin, owner.WorkspaceID, false)
	if err != nil || !res.Intact || res.Count != 1003 {
		t.Errorf("chain after 1,000 concurrent changes: %+v %v", res, err)
	}
}
