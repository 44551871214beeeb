package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

func testEmptyAndSettings(t *testing.T, db btk.Store) {
	read(t, db, func(tx btk.Tx) error {
		if empty, err := tx.Empty(ctx); err != nil || !empty {
			t.Errorf("Empty() = %v, %v on a new database", empty, err)
		}
		_, err := tx.Setting(ctx, "jwt_secret")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	write(t, db, func(tx btk.Tx) error {
		if err := tx.SetSetting(ctx, "jwt_secret", "one"); err != nil {
			return err
		}
		return tx.SetSetting(ctx, "jwt_secret", "two")
	})
	newAccount(t, db, "a@example.com")
	read(t, db, func(tx btk.Tx) error {
		if v, err := tx.Setting(ctx, "jwt_secret"); v != "two" || err != nil {
			t.Errorf("Setting = %q, %v; want the overwritten value", v, err)
		}
		if empty, err := tx.Empty(ctx); err != nil || empty {
			t.Errorf("Empty() = %v, %v with an account", empty, err)
		}
		return nil
	})
}

func testWorkspaceRoundTrip(t *testing.T, db btk.Store) {
	for name, w := range map[string]*btk.Workspace{
		"unset": {Plan: btk.PlanCloudStarter},
		"set":   {Plan: btk.PlanSelfHosted, RateLimitPerMinute: ptr(10), RateLimitPerDay: ptr(1000)},
	} {
		t.Run(name, func(t *testing.T) {
			w.ID = uuid.NewString()
			w.Name, w.PublicClientKey, w.CreatedAt = "Acme "+name, btk.NewPublicClientKey(w.ID), t0
			write(t, db, func(tx btk.Tx) error { return tx.CreateWorkspace(ctx, w) })
			readBack(t, db, "Workspace", w, func(tx btk.Tx) (*btk.Workspace, error) { return tx.Workspace(ctx, w.ID) })
			read(t, db, func(tx btk.Tx) error {
				got, err := tx.WorkspaceByPublicKey(ctx, w.PublicClientKey)
				if err != nil || got.ID != w.ID {
					t.Errorf("WorkspaceByPublicKey = %+v, %v", got, err)
				}
				return nil
			})
		})
	}
	read(t, db, func(tx btk.Tx) error {
		_, err := tx.Workspace(ctx, uuid.NewString())
		mustBe(t, err, btk.ErrNotFound)
		_, err = tx.WorkspaceByPublicKey(ctx, "bpk_nope")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
}

func testWorkspacesOldestFirstAndUpdate(t *testing.T, db btk.Store) {
	var want []string
	for i := range 3 {
		id := uuid.NewString()
		w := &btk.Workspace{ID: id, Name: "w", Plan: btk.PlanCloudPro, PublicClientKey: btk.NewPublicClientKey(id),
			CreatedAt: t0.Add(time.Duration(3-i) * time.Hour)}
		write(t, db, func(tx btk.Tx) error { return tx.CreateWorkspace(ctx, w) })
		want = append([]string{id}, want...)
	}
	read(t, db, func(tx btk.Tx) error {
		ws, err := tx.Workspaces(ctx)
		if err != nil {
			return err
		}
		var got []string
		for _, w := range ws {
			got = append(got, w.ID)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Workspaces order %v, want %v", got, want)
		}
		return nil
	})

	w := &btk.Workspace{ID: want[0], Name: "renamed", Plan: btk.PlanCloudEnterprise, RateLimitPerDay: ptr(5)}
	write(t, db, func(tx btk.Tx) error { return tx.UpdateWorkspace(ctx, w) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Workspace(ctx, w.ID)
		if err != nil {
			return err
		}
		if got.Name != "renamed" || got.Plan != btk.PlanCloudEnterprise || got.RateLimitPerMinute != nil || *got.RateLimitPerDay != 5 {
			t.Errorf("after update: %+v", got)
		}
		return nil
	})
	err := db.Write(ctx, func(tx btk.Tx) error {
		return tx.UpdateWorkspace(ctx, &btk.Workspace{ID: uuid.NewString(), Plan: btk.PlanCloudPro})
	})
	mustBe(t, err, btk.ErrNotFound)
}

func testPrefixTaken(t *testing.T, db btk.Store) {
	a := newWorkspace(t, db)
	id := a.Prefix() + uuid.NewString()[8:]
	b := &btk.Workspace{ID: id, Name: "b", Plan: btk.PlanCloudPro, PublicClientKey: btk.NewPublicClientKey(id), CreatedAt: t0}
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.CreateWorkspace(ctx, b) })
	mustBe(t, err, btk.ErrPrefixTaken)
}

func testAccountRoundTripAndEmail(t *testing.T, db btk.Store) {
	for _, admin := range []bool{false, true} {
		a := &btk.Account{ID: uuid.NewString(), Email: uuid.NewString() + "@Example.com", PasswordHash: "$argon2id$v=19$h", // #nosec G101 -- a placeholder hash in a test fixture, not a credential
			PlatformAdmin: admin, CreatedAt: t0}
		write(t, db, func(tx btk.Tx) error { return tx.CreateAccount(ctx, a) })
		readBack(t, db, "Account", a, func(tx btk.Tx) (*btk.Account, error) { return tx.Account(ctx, a.ID) })
	}

	a := newAccount(t, db, "Owner@Example.com")
	read(t, db, func(tx btk.Tx) error {
		for _, email := range []string{"Owner@Example.com", "owner@example.com", "OWNER@EXAMPLE.COM"} {
			got, err := tx.AccountByEmail(ctx, email)
			if err != nil || got.ID != a.ID {
				t.Errorf("AccountByEmail(%q) = %v, %v", email, got, err)
			}
		}
		_, err := tx.AccountByEmail(ctx, "other@example.com")
		mustBe(t, err, btk.ErrNotFound)
		_, err = tx.Account(ctx, "nope")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	for _, email := range []string{"Owner@Example.com", "owner@EXAMPLE.com"} {
		err := db.Write(ctx, func(tx btk.Tx) error {
			return tx.CreateAccount(ctx, &btk.Account{ID: uuid.NewString(), Email: email, CreatedAt: t0})
		})
		mustBe(t, err, btk.ErrEmailTaken)
	}
}

func testMemberships(t *testing.T, db btk.Store) {
	a := newAccount(t, db, "a@example.com")
	w1, w2, w3 := newWorkspace(t, db), newWorkspace(t, db), newWorkspace(t, db)
	write(t, db, func(tx btk.Tx) error {
		for _, m := range []btk.Membership{
			{WorkspaceID: w2.ID, AccountID: a.ID, Role: btk.RoleMember},
			{WorkspaceID: w1.ID, AccountID: a.ID, Role: btk.RoleAdmin},
			{WorkspaceID: w3.ID, AccountID: a.ID, Role: btk.RoleAdmin},
			{WorkspaceID: w2.ID, AccountID: a.ID, Role: btk.RoleOwner}, // upsert keeps w2 first
		} {
			if err := tx.SetMembership(ctx, m); err != nil {
				return err
			}
		}
		return tx.DeleteMembership(ctx, w3.ID, a.ID)
	})
	write(t, db, func(tx btk.Tx) error { return tx.DeleteMembership(ctx, w3.ID, a.ID) }) // none left: no error
	read(t, db, func(tx btk.Tx) error {
		ms, err := tx.Memberships(ctx, a.ID)
		if err != nil {
			return err
		}
		want := []btk.MembershipInfo{
			{WorkspaceID: w2.ID, WorkspaceName: w2.Name, Role: btk.RoleOwner},
			{WorkspaceID: w1.ID, WorkspaceName: w1.Name, Role: btk.RoleAdmin},
		}
		if !reflect.DeepEqual(ms, want) {
			t.Errorf("Memberships = %+v, want %+v", ms, want)
		}
		if r, err := tx.Role(ctx, w2.ID, a.ID); r != btk.RoleOwner || err != nil {
			t.Errorf("Role = %q, %v", r, err)
		}
		_, err = tx.Role(ctx, w3.ID, a.ID)
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	err := db.Write(ctx, func(tx btk.Tx) error {
		return tx.SetMembership(ctx, btk.Membership{WorkspaceID: w1.ID, AccountID: a.ID, Role: "GOD"})
	})
	if err == nil {
		t.Error("unknown role accepted")
	}
}

// PruneSessions deletes the sessions that expired before the cut, revoked
// or not, and no other; running it again deletes nothing.
func testPruneSessions(t *testing.T, db btk.Store) {
	a := newAccount(t, db, "a@example.com")
	cut := t0.Add(12 * time.Hour)
	var kept []string
	for _, s := range []*btk.Session{
		{ExpiresAt: cut.Add(-time.Nanosecond)},
		{ExpiresAt: t0.Add(time.Hour), RevokedAt: ptr(t0)},
		{ExpiresAt: cut},
		{ExpiresAt: cut.Add(time.Hour), RevokedAt: ptr(t0)},
	} {
		s.ID, s.AccountID, s.CreatedAt = uuid.NewString(), a.ID, t0
		write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, s) })
		if !s.ExpiresAt.Before(cut) {
			kept = append(kept, s.ID)
		}
	}
	if n, err := db.PruneSessions(ctx, cut); err != nil || n != 2 {
		t.Fatalf("PruneSessions = %d, %v; want 2", n, err)
	}
	if n, err := db.PruneSessions(ctx, cut); err != nil || n != 0 {
		t.Errorf("PruneSessions again = %d, %v; want 0", n, err)
	}
	read(t, db, func(tx btk.Tx) error {
		for _, id := range kept {
			if _, err := tx.Session(ctx, id); err != nil {
				t.Errorf("a session expiring at or after the cut: %v", err)
			}
		}
		return nil
	})
}

func testSessionRoundTripAndRevoke(t *testing.T, db btk.Store) {
	a := newAccount(t, db, "a@example.com")
	w := newWorkspace(t, db)
	for name, s := range map[string]*btk.Session{
		"unset": {},
		"set":   {WorkspaceID: w.ID, Impersonating: true, RevokedAt: ptr(t0.Add(time.Minute))},
	} {
		t.Run(name, func(t *testing.T) {
			s.ID, s.AccountID, s.CreatedAt, s.ExpiresAt = uuid.NewString(), a.ID, t0, t0.Add(12*time.Hour)
			write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, s) })
			readBack(t, db, "Session", s, func(tx btk.Tx) (*btk.Session, error) { return tx.Session(ctx, s.ID) })
		})
	}

	s := &btk.Session{ID: uuid.NewString(), AccountID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, s) })
	write(t, db, func(tx btk.Tx) error { return tx.RevokeSession(ctx, s.ID, t0.Add(time.Second)) })
	write(t, db, func(tx btk.Tx) error { return tx.RevokeSession(ctx, s.ID, t0.Add(time.Minute)) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Session(ctx, s.ID)
		if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("RevokedAt = %v, %v; want the first revocation", got.RevokedAt, err)
		}
		_, err = tx.Session(ctx, "nope")
		mustBe(t, err, btk.ErrNotFound)
		return nil
	})
	err := db.Write(ctx, func(tx btk.Tx) error { return tx.RevokeSession(ctx, "nope", t0) })
	mustBe(t, err, btk.ErrNotFound)

	// EndSession ends a live session only.
	live := &btk.Session{ID: uuid.NewString(), AccountID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, live) })
	write(t, db, func(tx btk.Tx) error { return tx.EndSession(ctx, live.ID, t0.Add(time.Second)) })
	for _, id := range []string{live.ID, s.ID, "nope"} {
		err := db.Write(ctx, func(tx btk.Tx) error { return tx.EndSession(ctx, id, t0.Add(time.Minute)) })
		mustBe(t, err, btk.ErrNotFound)
	}
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Session(ctx, live.ID)
		if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("RevokedAt = %v, %v; want the first end", got.RevokedAt, err)
		}
		return nil
	})
}

// Concurrent ends of one session (a browser's workspace switch sent twice
// at once): one wins, the others find it ended.
func testConcurrentEndSession(t *testing.T, db btk.Store) {
	a := newAccount(t, db, "end@example.com")
	s := &btk.Session{ID: uuid.NewString(), AccountID: a.ID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	write(t, db, func(tx btk.Tx) error { return tx.CreateSession(ctx, s) })
	errs := make([]error, 8)
	race(db, len(errs), func(i int) {
		errs[i] = db.Write(ctx, func(tx btk.Tx) error {
			if _, err := tx.Session(ctx, s.ID); err != nil {
				return err
			}
			widen()
			return tx.EndSession(ctx, s.ID, t0.Add(time.Duration(i)*time.Second))
		})
	})
	oneWon(t, "session ends", errs, btk.ErrNotFound)
}

func testTimesComeBackUTC(t *testing.T, db btk.Store) {
	local := t0.In(time.FixedZone("CEST", 2*3600))
	a := &btk.Account{ID: uuid.NewString(), Email: "tz@example.com", CreatedAt: local}
	write(t, db, func(tx btk.Tx) error { return tx.CreateAccount(ctx, a) })
	read(t, db, func(tx btk.Tx) error {
		got, err := tx.Account(ctx, a.ID)
		if err != nil {
			return err
		}
		if got.CreatedAt != t0 { // == on purpose: same instant, location and no monotonic reading
			t.Errorf("CreatedAt = %v (%v), want %v", got.CreatedAt, got.CreatedAt.Location(), t0)
		}
		return nil
	})
}
