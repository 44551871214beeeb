-- 0002: accounts can be disabled by a platform admin (NULL: enabled).
ALTER TABLE accounts ADD COLUMN disabled_at INTEGER;
