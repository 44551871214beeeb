-- 0002: accounts can be disabled by a platform admin (NULL: enabled), as in
-- the SQLite store's 0002.
ALTER TABLE accounts ADD COLUMN disabled_at BIGINT;
