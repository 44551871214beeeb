-- 0010: retention of finished webhook deliveries (docs/webhooks.md#delivery)
-- finds them by age through this index instead of reading the whole outbox.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (created_at) WHERE status <> 'PENDING';
