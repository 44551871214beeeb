package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

const (
	auditEntryCursor = 'a'
	auditEventCursor = 'e'
)

// AddAudit writes both rows of a change. An empty ID is filled in with a new
// UUID (written back to the struct); an empty Metadata is stored as "{}".
func (t *tx) AddAudit(ctx context.Context, e *btk.AuditEntry, ev *btk.AuditEvent) error {
	if e != nil {
		if e.ID == "" {
			e.ID = uuid.NewString()
		}
		created, err := sqlshared.UnixNano(e.CreatedAt)
		if err != nil {
			return err
		}
		var count any
		if e.RevokedCount != nil {
			count = int64(*e.RevokedCount)
		}
		if _, err := t.exec(ctx, "add audit entry", false,
			`INSERT INTO api_key_audit (id, workspace_id, action, api_key_id, api_key_name, new_api_key_id,
				revoked_count, actor_id, actor_email, impersonator_id, ip, user_agent, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.ID, e.WorkspaceID, string(e.Action), optStr(e.APIKeyID), e.APIKeyName, optStr(e.NewAPIKeyID),
			count, optStr(e.ActorID), e.ActorEmail, optStr(e.ImpersonatorID), e.IP, e.UserAgent, created); err != nil {
			return err
		}
	}
	if ev != nil {
		if ev.ID == "" {
			ev.ID = uuid.NewString()
		}
		if ev.Metadata == "" {
			ev.Metadata = "{}"
		}
		created, err := sqlshared.UnixNano(ev.CreatedAt)
		if err != nil {
			return err
		}
		// Linked into its chain and queued for webhooks (events.go).
		return t.addEvent(ctx, ev, created)
	}
	return nil
}

// auditQuery is the shared selection of both audit lists. keyFilters adds
// APIKeyID and Action, which only the key audit table has; a key id matches
// the entries about the key, the rotation that created it and the
// revoke-all that revoked it.
func auditQuery(base string, f btk.AuditFilter, keyFilters bool) (string, []any, error) {
	var b strings.Builder
	b.WriteString(base)
	var args []any
	if !keyFilters && f.NoWorkspace {
		b.WriteString(` WHERE workspace_id IS NULL`)
	} else {
		b.WriteString(` WHERE workspace_id = ?`)
		args = append(args, f.WorkspaceID)
	}
	switch {
	case keyFilters && (len(f.APIKeyIDs) > 0 || f.APIKeyID != ""):
		// The entries about the key (or any key of a rotation chain), and
		// the revoke-all that revoked one: its time is the key's
		// revoked_at.
		// The ids are one parameter (a chain has up to 2,001 keys), and
		// the revoked keys are found by id, not among every key of the
		// workspace.
		ids := f.APIKeyIDs
		if len(ids) == 0 {
			ids = []string{f.APIKeyID}
		}
		list, err := idList(ids)
		if err != nil {
			return "", nil, err
		}
		const in = `SELECT value FROM json_each(?)`
		b.WriteString(` AND (api_key_id IN (` + in + `) OR new_api_key_id IN (` + in + `)
			OR (action = 'REVOKED_ALL' AND created_at IN (
				SELECT revoked_at FROM api_keys WHERE id IN (` + in + `) AND +workspace_id = ?)))`)
		args = append(args, list, list, list, f.WorkspaceID)
	}
	if f.ActorEmail != "" {
		b.WriteString(` AND actor_email = ? COLLATE NOCASE`)
		args = append(args, f.ActorEmail)
	}
	if !keyFilters && f.EventAction != "" {
		b.WriteString(` AND action = ?`)
		args = append(args, f.EventAction)
	}
	if keyFilters && f.Action != "" {
		b.WriteString(` AND action = ?`)
		args = append(args, string(f.Action))
	}
	for _, c := range []struct {
		t  *time.Time
		op string
	}{{f.Since, ` AND created_at >= ?`}, {f.Until, ` AND created_at < ?`}} {
		if c.t == nil {
			continue
		}
		n, err := sqlshared.UnixNano(*c.t)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(c.op)
		args = append(args, n)
	}
	return b.String(), args, nil
}

// listAudit pages through base, the select of one of the two audit tables
// (keyFilters for the key audit), as f filters it.
func listAudit[T any](ctx context.Context, t *tx, op string, tag byte, base string, f btk.AuditFilter, keyFilters bool,
	scan func(sqlshared.Row) (T, int64, error)) ([]T, string, error) {
	q, args, err := auditQuery(base, f, keyFilters)
	if err != nil {
		return nil, "", err
	}
	return list(ctx, t, op, tag, f.Page, q, args, scan)
}

const selectAuditEntry = `SELECT seq, id, workspace_id, action, api_key_id, api_key_name, new_api_key_id, revoked_count,
	actor_id, actor_email, impersonator_id, ip, user_agent, created_at FROM api_key_audit`

func scanAuditEntry(row sqlshared.Row) (*btk.AuditEntry, int64, error) {
	var (
		e                           btk.AuditEntry
		seq, created                int64
		keyID, newKeyID, actor, imp sql.NullString
		count                       sql.NullInt64
	)
	err := row.Scan(&seq, &e.ID, &e.WorkspaceID, &e.Action, &keyID, &e.APIKeyName, &newKeyID, &count,
		&actor, &e.ActorEmail, &imp, &e.IP, &e.UserAgent, &created)
	e.APIKeyID, e.NewAPIKeyID, e.ActorID, e.ImpersonatorID = keyID.String, newKeyID.String, actor.String, imp.String
	e.RevokedCount, e.CreatedAt = fromOptInt(count), sqlshared.FromNano(created)
	return &e, seq, err
}

func (t *tx) AuditEntries(ctx context.Context, f btk.AuditFilter) ([]*btk.AuditEntry, string, error) {
	return listAudit(ctx, t, "audit entries", auditEntryCursor, selectAuditEntry, f, true, scanAuditEntry)
}

const selectAuditEvent = `SELECT seq, id, workspace_id, action, actor_id, actor_email, impersonator_id,
	target_type, target_id, metadata, created_at FROM audit_events`

func scanAuditEvent(row sqlshared.Row) (*btk.AuditEvent, int64, error) {
	var (
		ev                       btk.AuditEvent
		seq, created             int64
		ws, actor, imp, targetID sql.NullString
	)
	err := row.Scan(&seq, &ev.ID, &ws, &ev.Action, &actor, &ev.ActorEmail, &imp,
		&ev.TargetType, &targetID, &ev.Metadata, &created)
	ev.WorkspaceID, ev.ActorID, ev.ImpersonatorID, ev.TargetID = ws.String, actor.String, imp.String, targetID.String
	ev.CreatedAt = sqlshared.FromNano(created)
	return &ev, seq, err
}

func (t *tx) AuditEvents(ctx context.Context, f btk.AuditFilter) ([]*btk.AuditEvent, string, error) {
	return listAudit(ctx, t, "audit events", auditEventCursor, selectAuditEvent, f, false, scanAuditEvent)
}
