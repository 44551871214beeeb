package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
)

func testAuditRoundTrip(t *testing.T, db btk.Store, ws *btk.Workspace) {
	full := &btk.AuditEntry{ID: uuid.NewString(), WorkspaceID: ws.ID, Action: btk.AuditRotated,
		APIKeyID: "old", APIKeyName: "ci", NewAPIKeyID: "new", RevokedCount: ptr(0), ActorID: "acct",
		ActorEmail: "a@example.com", ImpersonatorID: "admin", IP: "192.0.2.1", UserAgent: "btk/1", CreatedAt: t0}
	fullEv := &btk.AuditEvent{ID: uuid.NewString(), WorkspaceID: ws.ID, Action: "api_key.rotated", ActorID: "acct",
		ActorEmail: "a@example.com", ImpersonatorID: "admin", TargetType: "api_key", TargetID: "old",
		Metadata: `{"newApiKeyId":"new"}`, CreatedAt: t0}
	bare := &btk.AuditEntry{ID: uuid.NewString(), WorkspaceID: ws.ID, Action: btk.AuditRevokedAll, CreatedAt: t0.Add(time.Second)}
	bareEv := &btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.revoked_all", CreatedAt: t0.Add(time.Second)}

	write(t, db, func(tx btk.Tx) error {
		if err := tx.AddAudit(ctx, full, fullEv); err != nil {
			return err
		}
		return tx.AddAudit(ctx, bare, bareEv)
	})
	if bareEv.ID == "" || bareEv.Metadata != "{}" {
		t.Errorf("AddAudit did not fill defaults: %+v", bareEv)
	}
	read(t, db, func(tx btk.Tx) error {
		es, next, err := tx.AuditEntries(ctx, btk.AuditFilter{WorkspaceID: ws.ID})
		if err != nil || next != "" || !reflect.DeepEqual(es, []*btk.AuditEntry{bare, full}) {
			t.Errorf("AuditEntries = %+v, %q, %v", es, next, err)
		}
		evs, next, err := tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: ws.ID})
		if err != nil || next != "" || !reflect.DeepEqual(evs, []*btk.AuditEvent{bareEv, fullEv}) {
			t.Errorf("AuditEvents = %+v, %q, %v", evs, next, err)
		}
		return nil
	})

	err := db.Write(ctx, func(tx btk.Tx) error {
		return tx.AddAudit(ctx, nil, &btk.AuditEvent{WorkspaceID: ws.ID, Action: "x", Metadata: "not json", CreatedAt: t0})
	})
	if err == nil {
		t.Error("invalid metadata JSON accepted")
	}
}

func testAuditFilters(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	type row struct {
		action      btk.AuditAction
		key, newKey string
		min         int
	}
	rows := []row{
		{btk.AuditCreated, "k1", "", 0},
		{btk.AuditCreated, "k2", "", 1},
		{btk.AuditRotated, "k1", "k3", 2},
		{btk.AuditRevoked, "k2", "", 3},
		{btk.AuditRevokedAll, "", "", 4},
	}
	write(t, db, func(tx btk.Tx) error {
		for _, r := range rows {
			at := t0.Add(time.Duration(r.min) * time.Minute)
			for _, w := range []*btk.Workspace{ws, other} {
				e := &btk.AuditEntry{WorkspaceID: w.ID, Action: r.action, APIKeyID: r.key, NewAPIKeyID: r.newKey,
					APIKeyName: string(r.action), CreatedAt: at}
				ev := &btk.AuditEvent{WorkspaceID: w.ID, Action: r.action.EventAction(), TargetType: "api_key", CreatedAt: at}
				if err := tx.AddAudit(ctx, e, ev); err != nil {
					return err
				}
			}
		}
		return nil
	})
	at := func(min int) *time.Time { return ptr(t0.Add(time.Duration(min) * time.Minute)) }
	tests := []struct {
		name string
		f    btk.AuditFilter
		want []string // actions, newest first
	}{
		{"all", btk.AuditFilter{}, []string{"REVOKED_ALL", "REVOKED", "ROTATED", "CREATED", "CREATED"}},
		{"key k1 (and the rotation)", btk.AuditFilter{APIKeyID: "k1"}, []string{"ROTATED", "CREATED"}},
		{"key k3 made by rotation", btk.AuditFilter{APIKeyID: "k3"}, []string{"ROTATED"}},
		{"action", btk.AuditFilter{Action: btk.AuditCreated}, []string{"CREATED", "CREATED"}},
		{"key and action", btk.AuditFilter{APIKeyID: "k2", Action: btk.AuditRevoked}, []string{"REVOKED"}},
		{"since inclusive", btk.AuditFilter{Since: at(3)}, []string{"REVOKED_ALL", "REVOKED"}},
		{"until exclusive", btk.AuditFilter{Until: at(1)}, []string{"CREATED"}},
		{"window", btk.AuditFilter{Since: at(1), Until: at(3)}, []string{"ROTATED", "CREATED"}},
		{"empty window", btk.AuditFilter{Since: at(3), Until: at(3)}, nil},
		{"unknown key", btk.AuditFilter{APIKeyID: "nope"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.WorkspaceID = ws.ID
			read(t, db, func(tx btk.Tx) error {
				es, _, err := tx.AuditEntries(ctx, tt.f)
				if err != nil {
					return err
				}
				var got []string
				for _, e := range es {
					if e.WorkspaceID != ws.ID {
						t.Errorf("entry of workspace %s", e.WorkspaceID)
					}
					got = append(got, string(e.Action))
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("AuditEntries actions %v, want %v", got, tt.want)
				}

				// audit_events honours the time filters and ignores the key ones.
				if tt.f.APIKeyID != "" || tt.f.Action != "" {
					return nil
				}
				evs, _, err := tx.AuditEvents(ctx, tt.f)
				if err != nil {
					return err
				}
				got = nil
				for _, ev := range evs {
					got = append(got, ev.Action)
				}
				var want []string
				for _, a := range tt.want {
					want = append(want, btk.AuditAction(a).EventAction())
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("AuditEvents actions %v, want %v", got, want)
				}
				return nil
			})
		})
	}
	read(t, db, func(tx btk.Tx) error {
		evs, _, err := tx.AuditEvents(ctx, btk.AuditFilter{WorkspaceID: ws.ID, APIKeyID: "k1", Action: btk.AuditCreated})
		if len(evs) != len(rows) || err != nil {
			t.Errorf("AuditEvents applied key filters: %d events, %v", len(evs), err)
		}
		return nil
	})
}

func testAuditPaging(t *testing.T, db btk.Store, ws *btk.Workspace) {
	var want []string
	write(t, db, func(tx btk.Tx) error {
		for i := range 7 {
			e := &btk.AuditEntry{WorkspaceID: ws.ID, Action: btk.AuditCreated, CreatedAt: t0.Add(time.Duration(i))}
			ev := &btk.AuditEvent{WorkspaceID: ws.ID, Action: "api_key.created", CreatedAt: t0.Add(time.Duration(i))}
			if err := tx.AddAudit(ctx, e, ev); err != nil {
				return err
			}
			want = append([]string{e.ID + ev.ID}, want...)
		}
		return nil
	})
	var (
		got        []string
		sizes      []int
		after, aEv string
	)
	for {
		var es []*btk.AuditEntry
		var evs []*btk.AuditEvent
		var next, nextEv string
		read(t, db, func(tx btk.Tx) (err error) {
			f := btk.AuditFilter{WorkspaceID: ws.ID, Page: btk.Page{First: 3, After: after}}
			if es, next, err = tx.AuditEntries(ctx, f); err != nil {
				return err
			}
			f.After = aEv
			evs, nextEv, err = tx.AuditEvents(ctx, f)
			return err
		})
		if len(es) != len(evs) || (next == "") != (nextEv == "") {
			t.Fatalf("entries and events page differently: %d/%d", len(es), len(evs))
		}
		sizes = append(sizes, len(es))
		for i := range es {
			got = append(got, es[i].ID+evs[i].ID)
		}
		if next == "" {
			break
		}
		after, aEv = next, nextEv
	}
	if !reflect.DeepEqual(sizes, []int{3, 3, 1}) || !reflect.DeepEqual(got, want) {
		t.Errorf("pages %v, ids %v; want [3 3 1], %v", sizes, got, want)
	}
}

// A key's audit log holds the revoke-all that revoked it (the entry whose
// time is the key's revoked_at, as the service writes them), not one that
// came after the key was revoked, nor another workspace's at the same time.
func testAuditKeyRevokedAll(t *testing.T, db btk.Store, ws *btk.Workspace) {
	other := newWorkspace(t, db)
	a, b := createKey(t, db, key(ws, "a")), createKey(t, db, key(ws, "b"))
	o := createKey(t, db, key(other, "o"))
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	write(t, db, func(tx btk.Tx) error {
		entry := func(w *btk.Workspace, action btk.AuditAction, keyID string, at time.Time) error {
			return tx.AddAudit(ctx, &btk.AuditEntry{WorkspaceID: w.ID, Action: action, APIKeyID: keyID, CreatedAt: at},
				&btk.AuditEvent{WorkspaceID: w.ID, Action: action.EventAction(), TargetType: "api_key", CreatedAt: at})
		}
		for _, k := range []*btk.APIKey{a, b} {
			if err := entry(ws, btk.AuditCreated, k.ID, t0); err != nil {
				return err
			}
		}
		if err := tx.RevokeAPIKey(ctx, b.ID, t1, "", ""); err != nil {
			return err
		}
		if err := entry(ws, btk.AuditRevoked, b.ID, t1); err != nil {
			return err
		}
		for _, w := range []*btk.Workspace{ws, other} {
			if _, err := tx.RevokeAllAPIKeys(ctx, w.ID, t2, ""); err != nil {
				return err
			}
			if err := entry(w, btk.AuditRevokedAll, "", t2); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tt := range []struct {
		f    btk.AuditFilter
		want []string
	}{
		{btk.AuditFilter{APIKeyID: a.ID}, []string{"REVOKED_ALL", "CREATED"}},
		{btk.AuditFilter{APIKeyIDs: []string{a.ID}}, []string{"REVOKED_ALL", "CREATED"}},
		{btk.AuditFilter{APIKeyID: b.ID}, []string{"REVOKED", "CREATED"}},
		{btk.AuditFilter{APIKeyID: a.ID, Action: btk.AuditCreated}, []string{"CREATED"}},
		{btk.AuditFilter{APIKeyID: o.ID}, nil}, // another workspace's key
	} {
		tt.f.WorkspaceID = ws.ID
		var es []*btk.AuditEntry
		read(t, db, func(tx btk.Tx) (err error) {
			es, _, err = tx.AuditEntries(ctx, tt.f)
			return err
		})
		var got []string
		for _, e := range es {
			got = append(got, string(e.Action))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%+v: %v, want %v", tt.f, got, tt.want)
		}
	}
}
