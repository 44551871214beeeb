package postgres_test

import (
	"errors"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/postgres"
	"github.com/btk-project/btk/internal/store/postgres/pgtest"
	"github.com/btk-project/btk/internal/store/storetest"
	"github.com/btk-project/btk/internal/testproc"
)

// The network loses PostgreSQL's answer to a usage flush's COMMIT: the
// store says the outcome is unknown, the flush did commit, and the same
// flush written again (as the service does) adds nothing
// (docs/usage.md#how-it-is-counted-and-why-it-is-exact).
func TestUsageCommitAnswerLost(t *testing.T) {
	url := pgtest.URL(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	relay := testproc.NewRelay(t, u.Host)
	db := open(t, strings.Replace(url, u.Host, relay.Addr, 1), postgres.Options{MaxConns: 2})
	ws := storetest.NewWorkspace(t, db)
	k := storetest.CreateKey(t, db, storetest.Key(ws, "k"))
	hour := time.Now().UTC().Truncate(time.Hour)
	flush := []btk.UsageFlush{{ID: "lost-answer", At: hour, Counts: []btk.UsageCount{
		{KeyID: k.ID, WorkspaceID: ws.ID, Start: hour, Accepted: 7},
	}}}
	accepted := func() int64 {
		t.Helper()
		var n int64
		err := db.Read(ctx, func(tx btk.Tx) error {
			rows, err := tx.UsageSeries(ctx, btk.UsageFilter{WorkspaceID: ws.ID, Since: hour, Until: hour.Add(time.Hour)})
			for _, r := range rows {
				n += r.Accepted
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	relay.LoseAnswer([]byte("commit\x00")) // the query "commit", not "read committed"
	err = db.RecordUsage(ctx, nil, flush, nil)
	if !errors.Is(err, btk.ErrCommitUnknown) {
		t.Fatalf("RecordUsage with the commit's answer lost: %v, want ErrCommitUnknown", err)
	}
	// The commit reached the server: it shows within moments.
	for deadline := time.Now().Add(10 * time.Second); accepted() != 7; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d: the commit whose answer was lost did not happen", accepted())
		}
	}
	if err := db.RecordUsage(ctx, nil, flush, nil); err != nil {
		t.Fatal(err)
	}
	if n := accepted(); n != 7 {
		t.Fatalf("accepted %d after the flush was written again, want 7", n)
	}
}
