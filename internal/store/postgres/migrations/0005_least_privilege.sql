-- 0005: least privilege (docs/access.md), as in the SQLite store's 0005: a
-- key's networks (JSON array of CIDR strings; empty = from anywhere), a
-- workspace's key policy (NULL = off), and the UPDATED key audit action.
ALTER TABLE api_keys ADD COLUMN allowed_cidrs JSON NOT NULL DEFAULT '[]' CHECK (json_typeof(allowed_cidrs) = 'array');

ALTER TABLE workspaces ADD COLUMN key_max_lifetime_days BIGINT
	CHECK (key_max_lifetime_days BETWEEN 1 AND 3650);
ALTER TABLE workspaces ADD COLUMN key_revoke_unused_days BIGINT
	CHECK (key_revoke_unused_days BETWEEN 1 AND 3650);

ALTER TABLE api_key_audit DROP CONSTRAINT IF EXISTS api_key_audit_action_check;
ALTER TABLE api_key_audit ADD CONSTRAINT api_key_audit_action_check
	CHECK (action IN ('CREATED', 'ROTATED', 'REVOKED', 'REVOKED_ALL', 'UPDATED'));

CREATE INDEX api_keys_workspace_unused ON api_keys (workspace_id, (coalesce(last_used_at, created_at))) WHERE revoked_at IS NULL;
