-- 0007: the event stream (docs/webhooks.md).
-- The audit chain: each audit_events row's place in its chain (a workspace's
-- rows, or the rows of no workspace) and its hash; the chain heads, locked
-- by every writer of a chain. Existing rows are chained by the store in Go
-- in this migration's transaction (SQLite has no SHA-256 function).
ALTER TABLE audit_events ADD COLUMN chain_seq INTEGER;
ALTER TABLE audit_events ADD COLUMN chain_hash TEXT;
CREATE TABLE audit_chain_heads (
	chain      TEXT PRIMARY KEY, -- workspace id, or '' for the rows of no workspace
	hash       TEXT NOT NULL,
	count      INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);

-- Webhooks: the signing secret is stored sealed (AES-GCM under a key
-- derived from the server secret). events: a JSON array, empty = all.
CREATE TABLE webhooks (
	seq          INTEGER PRIMARY KEY,
	id           TEXT NOT NULL UNIQUE,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	url          TEXT NOT NULL,
	events       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(events)),
	secret       TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	created_by   TEXT NOT NULL
);
CREATE INDEX webhooks_workspace ON webhooks (workspace_id, seq);

-- The outbox: one row per event and subscribed webhook, written in the
-- transaction of the change.
CREATE TABLE webhook_deliveries (
	seq              INTEGER PRIMARY KEY,
	id               TEXT NOT NULL UNIQUE,
	webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	workspace_id     TEXT NOT NULL,
	event_id         TEXT NOT NULL,
	event_type       TEXT NOT NULL,
	payload          TEXT NOT NULL,
	status           TEXT NOT NULL,
	attempts         INTEGER NOT NULL DEFAULT 0,
	next_attempt_at  INTEGER NOT NULL,
	lease_until      INTEGER,
	claim            TEXT,
	last_status_code INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	delivered_at     INTEGER
);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, seq);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';

-- api_key.expiring: the threshold (7 or 1 days) of the last notice sent.
ALTER TABLE api_keys ADD COLUMN expiry_notice_days INTEGER;
