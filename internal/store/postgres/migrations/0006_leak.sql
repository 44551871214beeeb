-- 0006: leak response (docs/leaks.md), as in the SQLite store's 0006. Canary
-- keys are never accepted; the use of one is recorded at most once a minute
-- per key, across instances, through canary_marks.
ALTER TABLE api_keys ADD COLUMN canary BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE canary_marks (
	api_key_id  TEXT PRIMARY KEY,
	recorded_at BIGINT NOT NULL
);
