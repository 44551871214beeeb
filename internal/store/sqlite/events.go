package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// The audit chain and the webhook outbox (docs/webhooks.md). SQLite runs
// one write transaction at a time, so reading the chain head and writing
// the next link cannot interleave with another writer.

const deliveryCursor = 'd'

// addEvent writes one audit_events row linked into its chain and queues it
// for the workspace's webhooks, all in t.
func (t *tx) addEvent(ctx context.Context, ev *btk.AuditEvent, created int64) error {
	chain := ev.WorkspaceID
	head, err := t.AuditChainHead(ctx, chain)
	if err != nil {
		return err
	}
	seq := head.Count + 1
	hash, err := btk.ChainHash(head.Hash, ev, seq, created)
	if err != nil {
		return err
	}
	if _, err := t.exec(ctx, "add audit event", false,
		`INSERT INTO audit_events (id, workspace_id, action, actor_id, actor_email, impersonator_id,
			target_type, target_id, metadata, created_at, chain_seq, chain_hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ev.ID, optStr(ev.WorkspaceID), ev.Action, optStr(ev.ActorID), ev.ActorEmail, optStr(ev.ImpersonatorID),
		ev.TargetType, optStr(ev.TargetID), ev.Metadata, created, seq, hash); err != nil {
		return err
	}
	if err := t.setChainHead(ctx, chain, hash, seq, created); err != nil {
		return err
	}
	if ev.WorkspaceID == "" {
		return nil
	}
	hooks, err := t.Webhooks(ctx, ev.WorkspaceID)
	if err != nil || len(hooks) == 0 {
		return err
	}
	// Each webhook's backlog is bounded (docs/webhooks.md#the-backlog-bound):
	// QueueEvent queues or counts as skipped; one writer, so the backlogs
	// read are the current ones.
	ds, changed, err := btk.QueueEvent(ev, hooks)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if err := t.queueDelivery(ctx, d); err != nil {
			return err
		}
	}
	for _, w := range changed {
		if err := t.setWebhookState(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) queueDelivery(ctx context.Context, d *btk.WebhookDelivery) error {
	_, err := t.exec(ctx, "queue delivery", false,
		`INSERT INTO webhook_deliveries (id, webhook_id, workspace_id, event_id, event_type, payload, status,
			next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.ID, d.WebhookID, d.WorkspaceID, d.EventID, d.EventType, d.Payload, string(d.Status), d.NextAttemptAt, d.CreatedAt)
	return err
}

// setWebhookState stores a webhook's latest attempt and backlog as
// QueueEvent or WebhookOutcome.Apply left them (the caller holds the row).
func (t *tx) setWebhookState(ctx context.Context, w *btk.Webhook) error {
	var last int64
	if !w.LastAttemptAt.IsZero() {
		last = w.LastAttemptAt.UnixNano()
	}
	_, err := t.exec(ctx, "webhook outcome", false, `UPDATE webhooks SET last_attempt_at = ?, failing_since = ?,
		pending = ?, skipped = ?, skipped_since = ?, skipped_until = ?, skipped_first = ?, skipped_last = ?,
		skipped_total = ? WHERE id = ?`,
		last, w.FailingSince, w.Pending, w.Skipped, optTime(w.SkippedSince), optTime(w.SkippedUntil),
		optStr(w.SkippedFirst), optStr(w.SkippedLast), w.SkippedTotal, w.ID)
	return err
}

// optTime is t, or nil (NULL) for the zero time.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (t *tx) setChainHead(ctx context.Context, chain, hash string, count, at int64) error {
	_, err := t.exec(ctx, "audit chain head", false,
		`INSERT INTO audit_chain_heads (chain, hash, count, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (chain) DO UPDATE SET hash = excluded.hash, count = excluded.count, updated_at = excluded.updated_at`,
		chain, hash, count, at)
	return err
}

func (t *tx) AuditChainHead(ctx context.Context, chain string) (btk.AuditHead, error) {
	var (
		h  = btk.AuditHead{Hash: btk.ZeroChainHash}
		at int64
	)
	err := t.tx.QueryRowContext(ctx, `SELECT hash, count, updated_at FROM audit_chain_heads WHERE chain = ?`, chain).
		Scan(&h.Hash, &h.Count, &at)
	switch {
	case err == sql.ErrNoRows:
		return btk.AuditHead{Hash: btk.ZeroChainHash}, nil
	case err != nil:
		return h, mapErr("audit chain head", err)
	}
	if h.Count == 0 { // a PostgreSQL head made by a writer's lock, nothing linked yet
		return btk.AuditHead{Hash: btk.ZeroChainHash}, nil
	}
	ts := sqlshared.FromNano(at)
	h.At = &ts
	return h, nil
}

const selectChainRow = `SELECT seq, id, workspace_id, action, actor_id, actor_email, impersonator_id, target_type, target_id,
	metadata, created_at, chain_seq, chain_hash FROM audit_events`

func scanChainRow(row sqlshared.Row) (*btk.ChainRow, error) {
	var (
		r                        btk.ChainRow
		ws, actor, imp, targetID sql.NullString
		cseq                     sql.NullInt64
		chash                    sql.NullString
	)
	if err := row.Scan(&r.Order, &r.Event.ID, &ws, &r.Event.Action, &actor, &r.Event.ActorEmail, &imp,
		&r.Event.TargetType, &targetID, &r.Event.Metadata, &r.CreatedNano, &cseq, &chash); err != nil {
		return nil, err
	}
	r.Event.WorkspaceID, r.Event.ActorID, r.Event.ImpersonatorID, r.Event.TargetID = ws.String, actor.String, imp.String, targetID.String
	r.Event.CreatedAt = sqlshared.FromNano(r.CreatedNano)
	r.Link = btk.ChainLink{Seq: cseq.Int64, Hash: chash.String}
	return &r, nil
}

func (t *tx) AuditChainRows(ctx context.Context, chain string, after int64, limit int) ([]*btk.ChainRow, error) {
	q := selectChainRow + ` WHERE `
	args := []any{}
	if chain == btk.ChainServerWide {
		q += `workspace_id IS NULL`
	} else {
		q += `workspace_id = ?`
		args = append(args, chain)
	}
	return all(ctx, t, "audit chain", scanChainRow, q+` AND seq > ? ORDER BY seq LIMIT ?`, append(args, after, limit)...)
}

// chainExisting links the rows written before migration 0007 into their
// chains, in seq order (run in that migration's transaction).
func chainExisting(ctx context.Context, sqlTx *sql.Tx) error {
	t := &tx{tx: sqlTx}
	type state struct {
		hash  string
		count int64
		at    int64
	}
	heads := map[string]*state{}
	var after int64
	for {
		batch, err := all(ctx, t, "link audit chains", scanChainRow, selectChainRow+` WHERE seq > ? ORDER BY seq LIMIT 1000`, after)
		if err != nil {
			return err
		}
		for _, r := range batch {
			st := heads[r.Event.WorkspaceID]
			if st == nil {
				st = &state{hash: btk.ZeroChainHash}
				heads[r.Event.WorkspaceID] = st
			}
			st.count++
			h, err := btk.ChainHash(st.hash, &r.Event, st.count, r.CreatedNano)
			if err != nil {
				return err
			}
			st.hash, st.at = h, r.CreatedNano
			if _, err := t.tx.ExecContext(ctx, `UPDATE audit_events SET chain_seq = ?, chain_hash = ? WHERE seq = ?`,
				st.count, h, r.Order); err != nil {
				return err
			}
		}
		if len(batch) < 1000 {
			break
		}
		after = batch[len(batch)-1].Order
	}
	for chain, st := range heads {
		if err := t.setChainHead(ctx, chain, st.hash, st.count, st.at); err != nil {
			return err
		}
	}
	return nil
}

// Webhooks.

const (
	webhookColumns = `id, workspace_id, url, events, secret, created_at, created_by, last_attempt_at, failing_since,
	pending, skipped, skipped_since, skipped_until, skipped_first, skipped_last, skipped_total`
	selectWebhook = `SELECT ` + webhookColumns + ` FROM webhooks`
)

func scanWebhook(row sqlshared.Row) (*btk.Webhook, error) {
	var (
		w                    btk.Webhook
		events               string
		created, lastAttempt int64
		failing, since, till sql.NullInt64
		first, last          sql.NullString
	)
	if err := row.Scan(&w.ID, &w.WorkspaceID, &w.URL, &events, &w.Sealed, &created, &w.CreatedBy, &lastAttempt, &failing,
		&w.Pending, &w.Skipped, &since, &till, &first, &last, &w.SkippedTotal); err != nil {
		return nil, err
	}
	if since.Valid && till.Valid {
		w.SkippedSince, w.SkippedUntil = sqlshared.FromNano(since.Int64), sqlshared.FromNano(till.Int64)
	}
	w.SkippedFirst, w.SkippedLast = first.String, last.String
	if lastAttempt != 0 {
		w.LastAttemptAt = sqlshared.FromNano(lastAttempt)
	}
	if failing.Valid {
		at := sqlshared.FromNano(failing.Int64)
		w.FailingSince = &at
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return nil, err
	}
	if len(w.Events) == 0 {
		w.Events = nil
	}
	w.CreatedAt = sqlshared.FromNano(created)
	return &w, nil
}

func (t *tx) CreateWebhook(ctx context.Context, w *btk.Webhook) error {
	events, err := json.Marshal(append([]string{}, w.Events...))
	if err != nil {
		return err
	}
	_, err = t.exec(ctx, "create webhook", false,
		`INSERT INTO webhooks (id, workspace_id, url, events, secret, created_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.WorkspaceID, w.URL, string(events), w.Sealed, w.CreatedAt, w.CreatedBy)
	return err
}

func (t *tx) Webhook(ctx context.Context, id string) (*btk.Webhook, error) {
	w, err := scanWebhook(t.tx.QueryRowContext(ctx, selectWebhook+` WHERE id = ?`, id))
	return w, mapErr("webhook", err)
}

func (t *tx) Webhooks(ctx context.Context, workspaceID string) ([]*btk.Webhook, error) {
	return all(ctx, t, "webhooks", scanWebhook, selectWebhook+` WHERE workspace_id = ? ORDER BY seq`, workspaceID)
}

func (t *tx) DeleteWebhook(ctx context.Context, id string) error {
	if _, err := t.exec(ctx, "delete webhook", false, `DELETE FROM webhook_deliveries WHERE webhook_id = ?`, id); err != nil {
		return err
	}
	_, err := t.exec(ctx, "delete webhook", true, `DELETE FROM webhooks WHERE id = ?`, id)
	return err
}

const selectDelivery = `SELECT d.seq, d.id, d.webhook_id, d.workspace_id, d.event_id, d.event_type, d.payload, d.status,
	d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, d.delivered_at, w.url, w.secret
	FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id`

func scanDelivery(row sqlshared.Row) (*btk.WebhookDelivery, int64, error) {
	var (
		d                 btk.WebhookDelivery
		seq, next, create int64
		delivered         sql.NullInt64
	)
	err := row.Scan(&seq, &d.ID, &d.WebhookID, &d.WorkspaceID, &d.EventID, &d.EventType, &d.Payload, &d.Status,
		&d.Attempts, &next, &d.LastStatusCode, &d.LastError, &create, &delivered, &d.URL, &d.Sealed)
	d.NextAttemptAt, d.CreatedAt = sqlshared.FromNano(next), sqlshared.FromNano(create)
	if delivered.Valid {
		at := sqlshared.FromNano(delivered.Int64)
		d.DeliveredAt = &at
	}
	return &d, seq, err
}

func (t *tx) WebhookDeliveries(ctx context.Context, f btk.DeliveryFilter) ([]*btk.WebhookDelivery, string, error) {
	// list pages by "seq": qualify it through a subquery.
	q := `SELECT * FROM (` + selectDelivery + ` WHERE d.webhook_id = ?) AS x WHERE 1 = 1`
	return list(ctx, t, "webhook deliveries", deliveryCursor, f.Page, q, []any{f.WebhookID}, scanDelivery)
}

// claimStatement leases the deliveries ClaimDue chooses; its arguments:
// the lease's end, the claim, now, the caps, the per-webhook limit and the
// limit.
var claimStatement = `UPDATE webhook_deliveries SET lease_until = ?, claim = ?
	WHERE seq IN (` + sqlshared.ClaimDue("?3", "?4", "?5", "?6", "?7", "?8", "?9", false) + `)`

func (t *tx) ClaimWebhookDeliveries(ctx context.Context, now time.Time, lease time.Duration, claim string, limit int, caps btk.DeliveryCaps) ([]*btk.WebhookDelivery, error) {
	n, err := sqlshared.UnixNano(now)
	if err != nil {
		return nil, err
	}
	until := n + int64(lease)
	if _, err := t.exec(ctx, "claim deliveries", false, claimStatement,
		until, claim, n, capOf(caps.PerWebhook), capOf(caps.PerFailingWebhook), capOf(caps.PerWorkspace),
		capOf(caps.FailingPerWorkspace), sqlshared.ClaimHookLimit(limit, caps), limit); err != nil {
		return nil, err
	}
	// Found through the index of leases, like the claim's count of them.
	return all(ctx, t, "claim deliveries", sqlshared.WithoutSeq(scanDelivery),
		selectDelivery+` WHERE d.lease_until = ? AND d.claim = ? AND d.status = 'PENDING' ORDER BY d.next_attempt_at`, until, claim)
}

func (t *tx) FinishWebhookDelivery(ctx context.Context, d *btk.WebhookDelivery, claim string) (bool, error) {
	n, err := t.exec(ctx, "finish delivery", false, `UPDATE webhook_deliveries SET status = ?, attempts = ?,
		next_attempt_at = ?, last_status_code = ?, last_error = ?, delivered_at = ?, lease_until = NULL, claim = NULL
		WHERE id = ? AND claim = ?`,
		string(d.Status), d.Attempts, d.NextAttemptAt, d.LastStatusCode, d.LastError, d.DeliveredAt, d.ID, claim)
	// A claimed delivery is PENDING: finished otherwise, it left the backlog.
	return n == 1 && d.Status != btk.DeliveryPending, err
}

func (t *tx) RecordWebhookOutcome(ctx context.Context, o btk.WebhookOutcome) error {
	// One writer: the row read is the current one until this commits.
	w, err := scanWebhook(t.tx.QueryRowContext(ctx, selectWebhook+` WHERE id = ?`, o.WebhookID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // deleted
	case err != nil:
		return mapErr("webhook outcome", err)
	}
	return t.storeOutcome(ctx, w, o)
}

// storeOutcome applies o to w, queues the notice it makes, if any, and
// stores w's attempt and backlog in one update.
func (t *tx) storeOutcome(ctx context.Context, w *btk.Webhook, o btk.WebhookOutcome) error {
	d, err := o.Apply(w)
	if err != nil {
		return err
	}
	if d != nil {
		if err := t.queueDelivery(ctx, d); err != nil {
			return err
		}
	}
	return t.setWebhookState(ctx, w)
}

// OutboxStats reads the webhooks (at most 10 a workspace) and the oldest
// entry of the index of pending deliveries by age, never the backlog
// itself (docs/webhooks.md#metrics).
func (t *tx) OutboxStats(ctx context.Context, now time.Time) (btk.OutboxStats, error) {
	var (
		st     btk.OutboxStats
		oldest sql.NullInt64
	)
	err := t.tx.QueryRowContext(ctx, `SELECT coalesce(sum(pending), 0), coalesce(sum(pending >= ?), 0),
		coalesce(sum(skipped_total), 0) FROM webhooks`, btk.MaxPendingPerWebhook).Scan(&st.Pending, &st.Full, &st.Skipped)
	if err != nil {
		return st, mapErr("outbox stats", err)
	}
	err = t.tx.QueryRowContext(ctx, `SELECT min(created_at) FROM webhook_deliveries WHERE status = 'PENDING'`).Scan(&oldest)
	if oldest.Valid {
		at := sqlshared.FromNano(oldest.Int64)
		st.OldestPending = &at
	}
	return st, mapErr("outbox stats", err)
}

func (t *tx) ExpiringKeys(ctx context.Context, now, within7, within1 time.Time, limit int) ([]*btk.APIKey, error) {
	var ns [3]int64
	for i, at := range []time.Time{now, within7, within1} {
		n, err := sqlshared.UnixNano(at)
		if err != nil {
			return nil, err
		}
		ns[i] = n
	}
	return all(ctx, t, "expiring keys", sqlshared.WithoutSeq(scanKey),
		selectKey+` WHERE revoked_at IS NULL AND expires_at > ? AND expires_at <= ?
		AND (expiry_notice_days IS NULL OR (expiry_notice_days > 1 AND expires_at <= ?)) ORDER BY expires_at LIMIT ?`,
		ns[0], ns[1], ns[2], limit)
}

func (t *tx) MarkExpiryNotice(ctx context.Context, keyID string, days int) (bool, error) {
	n, err := t.exec(ctx, "expiry notice", false, `UPDATE api_keys SET expiry_notice_days = ?
		WHERE id = ? AND (expiry_notice_days IS NULL OR expiry_notice_days > ?)`, days, keyID, days)
	return n == 1, err
}

// capOf is a claim cap for the query: 0 (no cap) is any number.
func capOf(n int) int64 {
	if n <= 0 {
		return 1 << 62
	}
	return int64(n)
}
