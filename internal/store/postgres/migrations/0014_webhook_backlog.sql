-- 0014, as the SQLite store's: each webhook's backlog is bounded, and
-- claims and the outbox figures read a bounded number of rows
-- (docs/webhooks.md#the-backlog-bound). pending counts the webhook's
-- PENDING deliveries, kept in the transactions that queue them (which lock
-- the workspace's webhook rows) and finish them; an event that finds it at
-- the bound is not queued but counted in skipped (since the last notice;
-- skipped_since and skipped_until are the times of the oldest and newest
-- such event, skipped_first and skipped_last their ids) and in
-- skipped_total.
ALTER TABLE webhooks ADD COLUMN pending BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN skipped_since BIGINT;
ALTER TABLE webhooks ADD COLUMN skipped_until BIGINT;
ALTER TABLE webhooks ADD COLUMN skipped_first TEXT;
ALTER TABLE webhooks ADD COLUMN skipped_last TEXT;
ALTER TABLE webhooks ADD COLUMN skipped_total BIGINT NOT NULL DEFAULT 0;
UPDATE webhooks SET pending = (SELECT count(*) FROM webhook_deliveries d WHERE d.webhook_id = webhooks.id AND d.status = 'PENDING');
-- Claims visit only the webhooks with a backlog, and in each only its
-- first due deliveries, in the order they are taken (LATERAL … LIMIT); the
-- leased deliveries (in flight, a few) are counted through an index of
-- their own; the oldest pending delivery is the first entry of an index by
-- age. The index by next attempt alone served claims that read every due
-- delivery.
CREATE INDEX webhooks_backlog ON webhooks (id) WHERE pending > 0;
DROP INDEX webhook_deliveries_due;
CREATE INDEX webhook_deliveries_next ON webhook_deliveries (webhook_id, next_attempt_at, seq) WHERE status = 'PENDING';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX webhook_deliveries_pending_age ON webhook_deliveries (created_at) WHERE status = 'PENDING';
