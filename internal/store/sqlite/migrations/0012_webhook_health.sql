-- 0012: a webhook's health, for fair claims (docs/webhooks.md#delivery):
-- when its latest attempt ended (claims serve the webhook that waited
-- longest first) and since when its attempts fail (NULL: the latest one
-- succeeded, or none was made). A failing webhook gets fewer deliveries in
-- flight, so that it cannot hold its workspace's share.
ALTER TABLE webhooks ADD COLUMN last_attempt_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN failing_since INTEGER;
