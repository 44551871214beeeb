package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/testproc"
)

// hungClientTimeout bounds each request of these tests: far above the
// store's deadline (postgres.TxTimeout) and /readyz's, so that an answer
// within it is the server's, not the client giving up.
const hungClientTimeout = 60 * time.Second

// PostgreSQL hung (a black hole: connections already open stop answering,
// none is refused): /readyz and session requests on the pooled connections
// answer 503 UNAVAILABLE rather than hanging, all of many concurrent ones
// too, and everything serves again once the network heals
// (docs/clusters.md#postgresql).
func testPostgresHung(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	relay := testproc.NewRelay(t, hostOf(t, url))
	e := newEnvOn(t, strings.Replace(url, hostOf(t, url), relay.Addr, 1), nil)
	token := e.login(adminEmail, adminPassword, "")
	client := &http.Client{Timeout: hungClientTimeout}
	// Open several pooled connections, so that the requests below meet
	// connections that are open and hung, not only new ones.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { e.doWith(client, cred{Bearer: token}, `{me{id}}`, nil) })
	}
	wg.Wait()

	relay.Hang()
	readyz := func() int {
		res, err := client.Get(e.srv.URL + "/readyz")
		if err != nil {
			t.Errorf("/readyz with PostgreSQL hung: %v (no answer)", err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := readyz(); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with PostgreSQL hung: HTTP %d, want 503", s)
	}
	const n = 40
	statuses := make([]string, n)
	for i := range n {
		wg.Go(func() {
			r := e.doWith(client, cred{Bearer: token}, `{me{id}}`, nil)
			statuses[i] = http.StatusText(r.Status) + " " + r.Code()
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusText(http.StatusServiceUnavailable)+" "+string(btk.CodeUnavailable) {
			t.Fatalf("session request %d of %d with PostgreSQL hung: %q, want 503 UNAVAILABLE", i+1, n, s)
		}
	}

	relay.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for readyz() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not answer 200 after the network healed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.doWith(client, cred{Bearer: token}, `{me{id}}`, nil); r.Status != http.StatusOK || r.Code() != "" {
		t.Fatalf("session request after the network healed: HTTP %d %+v", r.Status, r.Errors)
	}
}
