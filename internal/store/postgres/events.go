package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlshared"
)

// The audit chain and the webhook outbox (docs/webhooks.md). A writer of a
// chain locks the chain's head row (SELECT … FOR UPDATE) before it reads
// the head and writes the next link, so each chain stays linear under
// concurrent writers on any number of instances; deliveries are claimed
// with FOR UPDATE SKIP LOCKED and a lease, so one instance sends each.

const deliveryCursor = 'd'

// addEvent writes one audit_events row linked into its chain and queues it
// for the workspace's webhooks, all in t.
func (t *tx) addEvent(ctx context.Context, ev *btk.AuditEvent, created int64) error {
	chain := ev.WorkspaceID
	head, err := t.lockChain(ctx, chain)
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
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CAST($9::text AS json), $10, $11, $12)`,
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
	// Each webhook's backlog is bounded (docs/webhooks.md#the-backlog-bound):
	// QueueEvent decides on the backlogs, so the workspace's webhook rows
	// are locked while it does, in id order as a recorder takes them
	// (RecordDeliveries), and hold their counts until this commits. The
	// deliveries are queued in the webhooks' order, as Webhooks lists them
	// (ties in a claim's turns go to the earlier row).
	hooks, err := all(ctx, t, "webhooks", scanWebhook, `SELECT `+webhookColumns+` FROM (
		SELECT seq, `+webhookColumns+` FROM webhooks WHERE workspace_id = $1 ORDER BY id FOR NO KEY UPDATE) w ORDER BY seq`, ev.WorkspaceID)
	if err != nil || len(hooks) == 0 {
		return err
	}
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
			next_attempt_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
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
	_, err := t.exec(ctx, "webhook outcome", false, `UPDATE webhooks SET last_attempt_at = $1, failing_since = $2,
		pending = $3, skipped = $4, skipped_since = $5, skipped_until = $6, skipped_first = $7, skipped_last = $8,
		skipped_total = $9 WHERE id = $10`,
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

// lockChain locks what a writer of the chain's next row holds, in the
// order every writer takes it, and returns the head.
func (t *tx) lockChain(ctx context.Context, chain string) (btk.AuditHead, error) {
	if chain != "" {
		// The workspace row before the chain's head: the audit_events
		// row's foreign key locks it (FOR KEY SHARE) anyway, and a change
		// that holds it FOR UPDATE (a key created, a plan changed) takes
		// the head after it. Taken after the head, an event alone (an
		// elevation, a canary's use) and such a change deadlocked.
		if _, err := t.exec(ctx, "add audit event", false,
			`SELECT FROM workspaces WHERE id = $1 FOR KEY SHARE`, chain); err != nil {
			return btk.AuditHead{}, err
		}
	}
	return t.lockChainHead(ctx, chain)
}

// lockChainHead locks the chain's head row (creating it, empty, for a new
// chain) until the transaction ends and returns it: the next writer of the
// chain waits here.
func (t *tx) lockChainHead(ctx context.Context, chain string) (btk.AuditHead, error) {
	if _, err := t.exec(ctx, "audit chain head", false,
		`INSERT INTO audit_chain_heads (chain, hash, count, updated_at) VALUES ($1, $2, 0, 0) ON CONFLICT (chain) DO NOTHING`,
		chain, btk.ZeroChainHash); err != nil {
		return btk.AuditHead{}, err
	}
	h := btk.AuditHead{}
	err := t.tx.QueryRow(ctx, `SELECT hash, count FROM audit_chain_heads WHERE chain = $1 FOR UPDATE`, chain).Scan(&h.Hash, &h.Count)
	return h, mapErr("audit chain head", err)
}

func (t *tx) setChainHead(ctx context.Context, chain, hash string, count, at int64) error {
	_, err := t.exec(ctx, "audit chain head", false,
		`INSERT INTO audit_chain_heads (chain, hash, count, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (chain) DO UPDATE SET hash = excluded.hash, count = excluded.count, updated_at = excluded.updated_at`,
		chain, hash, count, at)
	return err
}

func (t *tx) AuditChainHead(ctx context.Context, chain string) (btk.AuditHead, error) {
	var (
		h  = btk.AuditHead{Hash: btk.ZeroChainHash}
		at int64
	)
	err := t.tx.QueryRow(ctx, `SELECT hash, count, updated_at FROM audit_chain_heads WHERE chain = $1`, chain).
		Scan(&h.Hash, &h.Count, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
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
	metadata::text, created_at, chain_seq, chain_hash FROM audit_events`

func scanChainRow(row sqlshared.Row) (*btk.ChainRow, error) {
	var (
		r                        btk.ChainRow
		ws, actor, imp, targetID *string
		cseq                     *int64
		chash                    *string
	)
	if err := row.Scan(&r.Order, &r.Event.ID, &ws, &r.Event.Action, &actor, &r.Event.ActorEmail, &imp,
		&r.Event.TargetType, &targetID, &r.Event.Metadata, &r.CreatedNano, &cseq, &chash); err != nil {
		return nil, err
	}
	r.Event.WorkspaceID, r.Event.ActorID, r.Event.ImpersonatorID, r.Event.TargetID = str(ws), str(actor), str(imp), str(targetID)
	r.Event.CreatedAt = sqlshared.FromNano(r.CreatedNano)
	if cseq != nil {
		r.Link.Seq = *cseq
	}
	r.Link.Hash = str(chash)
	return &r, nil
}

func (t *tx) AuditChainRows(ctx context.Context, chain string, after int64, limit int) ([]*btk.ChainRow, error) {
	q := selectChainRow + ` WHERE `
	var a args
	if chain == btk.ChainServerWide {
		q += `workspace_id IS NULL`
	} else {
		q += `workspace_id = ` + a.add(chain)
	}
	q += ` AND seq > ` + a.add(after) + ` ORDER BY seq LIMIT ` + a.add(limit)
	return all(ctx, t, "audit chain", scanChainRow, q, a...)
}

// chainExisting links the rows written before migration 0007 into their
// chains, in seq order (run in that migration's transaction).
func chainExisting(ctx context.Context, pgTx pgx.Tx) error {
	t := &tx{tx: pgTx, write: true}
	type state struct {
		hash  string
		count int64
		at    int64
	}
	heads := map[string]*state{}
	var after int64
	for {
		batch, err := all(ctx, t, "link audit chains", scanChainRow, selectChainRow+` WHERE seq > $1 ORDER BY seq LIMIT 1000`, after)
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
			if _, err := t.tx.Exec(ctx, `UPDATE audit_events SET chain_seq = $1, chain_hash = $2 WHERE seq = $3`,
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
		failing, since, till *int64
		first, last          *string
	)
	if err := row.Scan(&w.ID, &w.WorkspaceID, &w.URL, &events, &w.Sealed, &created, &w.CreatedBy, &lastAttempt, &failing,
		&w.Pending, &w.Skipped, &since, &till, &first, &last, &w.SkippedTotal); err != nil {
		return nil, err
	}
	if since != nil && till != nil {
		w.SkippedSince, w.SkippedUntil = sqlshared.FromNano(*since), sqlshared.FromNano(*till)
	}
	w.SkippedFirst, w.SkippedLast = str(first), str(last)
	if lastAttempt != 0 {
		w.LastAttemptAt = sqlshared.FromNano(lastAttempt)
	}
	w.FailingSince = fromOptNano(failing)
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
		`INSERT INTO webhooks (id, workspace_id, url, events, secret, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		w.ID, w.WorkspaceID, w.URL, string(events), w.Sealed, w.CreatedAt, w.CreatedBy)
	return err
}

func (t *tx) Webhook(ctx context.Context, id string) (*btk.Webhook, error) {
	w, err := scanWebhook(t.tx.QueryRow(ctx, selectWebhook+` WHERE id = $1`, id))
	return w, mapErr("webhook", err)
}

func (t *tx) Webhooks(ctx context.Context, workspaceID string) ([]*btk.Webhook, error) {
	return all(ctx, t, "webhooks", scanWebhook, selectWebhook+` WHERE workspace_id = $1 ORDER BY seq`, workspaceID)
}

func (t *tx) DeleteWebhook(ctx context.Context, id string) error {
	// The workspace's chain before the webhook's row: a writer of an event
	// holds the chain's head, then locks the workspace's webhook rows
	// (addEvent), and the deletion's own webhook.deleted event takes the
	// head after the row otherwise: the two waited for each other.
	var ws string
	if err := t.tx.QueryRow(ctx, `SELECT workspace_id FROM webhooks WHERE id = $1`, id).Scan(&ws); err != nil {
		return mapErr("delete webhook", err)
	}
	if _, err := t.lockChain(ctx, ws); err != nil {
		return err
	}
	// The deliveries in id order, as a recorder finishes them
	// (RecordDeliveries): the DELETE alone locks them in its scan's order,
	// and deadlocked with a recorder holding some of them.
	if _, err := t.exec(ctx, "delete webhook", false,
		`SELECT FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY id FOR UPDATE`, id); err != nil {
		return err
	}
	if _, err := t.exec(ctx, "delete webhook", false, `DELETE FROM webhook_deliveries WHERE webhook_id = $1`, id); err != nil {
		return err
	}
	_, err := t.exec(ctx, "delete webhook", true, `DELETE FROM webhooks WHERE id = $1`, id)
	return err
}

const selectDelivery = `SELECT d.seq, d.id, d.webhook_id, d.workspace_id, d.event_id, d.event_type, d.payload, d.status,
	d.attempts, d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, d.delivered_at, w.url, w.secret
	FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id`

func scanDelivery(row sqlshared.Row) (*btk.WebhookDelivery, int64, error) {
	var (
		d                 btk.WebhookDelivery
		seq, next, create int64
		delivered         *int64
	)
	err := row.Scan(&seq, &d.ID, &d.WebhookID, &d.WorkspaceID, &d.EventID, &d.EventType, &d.Payload, &d.Status,
		&d.Attempts, &next, &d.LastStatusCode, &d.LastError, &create, &delivered, &d.URL, &d.Sealed)
	d.NextAttemptAt, d.CreatedAt = sqlshared.FromNano(next), sqlshared.FromNano(create)
	d.DeliveredAt = fromOptNano(delivered)
	return &d, seq, err
}

func (t *tx) WebhookDeliveries(ctx context.Context, f btk.DeliveryFilter) ([]*btk.WebhookDelivery, string, error) {
	// list pages by "seq": qualify it through a subquery.
	q := `SELECT * FROM (` + selectDelivery + ` WHERE d.webhook_id = $1) AS x WHERE 1 = 1`
	return list(ctx, t, "webhook deliveries", deliveryCursor, f.Page, q, []any{f.WebhookID}, scanDelivery)
}

// claimStatement leases the deliveries ClaimDue chooses; its arguments:
// the lease's end, the claim, now, the caps, the per-webhook limit and the
// limit. The candidates are chosen within the caps (window functions
// cannot be locked), then locked, skipping the rows another instance is
// claiming.
var claimStatement = `UPDATE webhook_deliveries SET lease_until = $1, claim = $2
	WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE seq IN (` + sqlshared.ClaimDue("$3", "$4", "$5", "$6", "$7", "$8", "$9", true) + `)
		AND status = 'PENDING' AND (lease_until IS NULL OR lease_until <= $3) FOR UPDATE SKIP LOCKED)`

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
		selectDelivery+` WHERE d.lease_until = $1 AND d.claim = $2 AND d.status = 'PENDING' ORDER BY d.next_attempt_at`, until, claim)
}

func (t *tx) FinishWebhookDelivery(ctx context.Context, d *btk.WebhookDelivery, claim string) (bool, error) {
	n, err := t.exec(ctx, "finish delivery", false, `UPDATE webhook_deliveries SET status = $1, attempts = $2,
		next_attempt_at = $3, last_status_code = $4, last_error = $5, delivered_at = $6, lease_until = NULL, claim = NULL
		WHERE id = $7 AND claim = $8`,
		string(d.Status), d.Attempts, d.NextAttemptAt, d.LastStatusCode, d.LastError, d.DeliveredAt, d.ID, claim)
	// A claimed delivery is PENDING: finished otherwise, it left the backlog.
	return n == 1 && d.Status != btk.DeliveryPending, err
}

func (t *tx) RecordWebhookOutcome(ctx context.Context, o btk.WebhookOutcome) error {
	// Locked, not updated, while the outcome is decided: the one update
	// below is the row's first in this transaction, so its foreign key is
	// not checked (a second update would lock the workspace's row, after
	// the webhook's: the reverse of a writer of an event, which deadlocked
	// with a key being created).
	w, err := scanWebhook(t.tx.QueryRow(ctx, selectWebhook+` WHERE id = $1 FOR NO KEY UPDATE`, o.WebhookID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
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
		oldest *int64
	)
	err := t.tx.QueryRow(ctx, `SELECT coalesce(sum(pending), 0)::bigint, count(*) FILTER (WHERE pending >= $1),
		coalesce(sum(skipped_total), 0)::bigint FROM webhooks`, btk.MaxPendingPerWebhook).Scan(&st.Pending, &st.Full, &st.Skipped)
	if err != nil {
		return st, mapErr("outbox stats", err)
	}
	err = t.tx.QueryRow(ctx, `SELECT min(created_at) FROM webhook_deliveries WHERE status = 'PENDING'`).Scan(&oldest)
	st.OldestPending = fromOptNano(oldest)
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
		selectKey+` WHERE revoked_at IS NULL AND expires_at > $1 AND expires_at <= $2
		AND (expiry_notice_days IS NULL OR (expiry_notice_days > 1 AND expires_at <= $3)) ORDER BY expires_at LIMIT $4`,
		ns[0], ns[1], ns[2], limit)
}

func (t *tx) MarkExpiryNotice(ctx context.Context, keyID string, days int) (bool, error) {
	n, err := t.exec(ctx, "expiry notice", false, `UPDATE api_keys SET expiry_notice_days = $1
		WHERE id = $2 AND (expiry_notice_days IS NULL OR expiry_notice_days > $3)`, days, keyID, days)
	return n == 1, err
}

// capOf is a claim cap for the query: 0 (no cap) is any number.
func capOf(n int) int64 {
	if n <= 0 {
		return 1 << 62
	}
	return int64(n)
}
