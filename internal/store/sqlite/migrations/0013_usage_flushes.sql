-- 0013: the ids of the usage flushes written in the last day
-- (docs/usage.md#how-it-is-counted-and-why-it-is-exact). A flush's counts are added only
-- when its id is new here, so a flush written again after a commit whose
-- answer was lost is not counted twice. Retention deletes them by age.
CREATE TABLE usage_flushes (
	id TEXT PRIMARY KEY,
	at INTEGER NOT NULL
);
CREATE INDEX usage_flushes_at ON usage_flushes (at);
