-- 0008, as the SQLite store's: usage of each key per hour (docs/usage.md).
-- Every instance adds what it counted to the row of the key and hour; retention deletes old hours.
-- No foreign key: keys are never deleted, and a flush must not fail for ever
-- on one row.
CREATE TABLE api_key_usage (
	api_key_id   TEXT NOT NULL,
	workspace_id TEXT NOT NULL,
	hour         BIGINT NOT NULL, -- unix ns of the hour's start
	accepted     BIGINT NOT NULL DEFAULT 0,
	rate_limited BIGINT NOT NULL DEFAULT 0,
	refused      BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (api_key_id, hour)
);
CREATE INDEX api_key_usage_workspace ON api_key_usage (workspace_id, hour);
CREATE INDEX api_key_usage_hour ON api_key_usage (hour);

-- The latest accepted use of each key: client address and user agent (each
-- at most 256 bytes).
CREATE TABLE api_key_clients (
	api_key_id TEXT PRIMARY KEY,
	at         BIGINT NOT NULL,
	ip         TEXT NOT NULL,
	user_agent TEXT NOT NULL
);
