-- 0006: leak response (docs/leaks.md). Canary keys are never accepted; the
-- use of one is recorded at most once a minute per key, across instances,
-- through canary_marks (the time of the last recorded use).
ALTER TABLE api_keys ADD COLUMN canary INTEGER NOT NULL DEFAULT 0 CHECK (canary IN (0, 1));
CREATE TABLE canary_marks (
	api_key_id  TEXT PRIMARY KEY,
	recorded_at INTEGER NOT NULL
);
