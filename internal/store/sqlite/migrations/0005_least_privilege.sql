-- 0005: least privilege (docs/access.md).
--
-- A key's networks (a JSON array of CIDR strings; empty = from anywhere), a
-- workspace's key policy (NULL = off), and the UPDATED action of the key
-- audit table. SQLite cannot change a CHECK constraint in place, so the audit
-- table is rebuilt (no foreign key points at it).
ALTER TABLE api_keys ADD COLUMN allowed_cidrs TEXT NOT NULL DEFAULT '[]'
	CHECK (json_valid(allowed_cidrs) AND json_type(allowed_cidrs) = 'array');

ALTER TABLE workspaces ADD COLUMN key_max_lifetime_days INTEGER
	CHECK (key_max_lifetime_days BETWEEN 1 AND 3650);
ALTER TABLE workspaces ADD COLUMN key_revoke_unused_days INTEGER
	CHECK (key_revoke_unused_days BETWEEN 1 AND 3650);

CREATE TABLE api_key_audit_0005 (
	seq             INTEGER PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	workspace_id    TEXT NOT NULL REFERENCES workspaces (id),
	action          TEXT NOT NULL CHECK (action IN ('CREATED', 'ROTATED', 'REVOKED', 'REVOKED_ALL', 'UPDATED')),
	api_key_id      TEXT,
	api_key_name    TEXT NOT NULL,
	new_api_key_id  TEXT,
	revoked_count   INTEGER,
	actor_id        TEXT,
	actor_email     TEXT NOT NULL,
	impersonator_id TEXT,
	ip              TEXT NOT NULL,
	user_agent      TEXT NOT NULL,
	created_at      INTEGER NOT NULL
);
INSERT INTO api_key_audit_0005 (seq, id, workspace_id, action, api_key_id, api_key_name, new_api_key_id,
	revoked_count, actor_id, actor_email, impersonator_id, ip, user_agent, created_at)
SELECT seq, id, workspace_id, action, api_key_id, api_key_name, new_api_key_id,
	revoked_count, actor_id, actor_email, impersonator_id, ip, user_agent, created_at FROM api_key_audit;
DROP TABLE api_key_audit;
ALTER TABLE api_key_audit_0005 RENAME TO api_key_audit;
CREATE INDEX api_key_audit_workspace ON api_key_audit (workspace_id, seq);
CREATE INDEX api_key_audit_key ON api_key_audit (api_key_id) WHERE api_key_id IS NOT NULL;
CREATE INDEX api_key_audit_new_key ON api_key_audit (new_api_key_id) WHERE new_api_key_id IS NOT NULL;

-- The unused-key sweep reads the active keys of a workspace.
CREATE INDEX IF NOT EXISTS api_keys_workspace_unused ON api_keys (workspace_id, coalesce(last_used_at, created_at)) WHERE revoked_at IS NULL;
