-- 0001: initial schema.
--
-- Times are INTEGER unix nanoseconds (UTC). Optional ids are NULL, never ''.
-- Tables that are paged newest first have an INTEGER PRIMARY KEY seq (the
-- rowid, stable across VACUUM) that orders rows by insertion and serves as the
-- cursor; their public UUID lives in a separate UNIQUE id column.

CREATE TABLE settings (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE workspaces (
	id                    TEXT PRIMARY KEY,
	name                  TEXT NOT NULL,
	prefix                TEXT NOT NULL UNIQUE CHECK (length(prefix) = 8),
	plan                  TEXT NOT NULL CHECK (plan IN ('CLOUD_STARTER', 'CLOUD_PRO', 'CLOUD_ENTERPRISE', 'SELF_HOSTED')),
	public_client_key     TEXT NOT NULL UNIQUE,
	rate_limit_per_minute INTEGER,
	rate_limit_per_day    INTEGER,
	created_at            INTEGER NOT NULL,
	CHECK (substr(id, 1, 8) = prefix)
);

CREATE TABLE accounts (
	id             TEXT PRIMARY KEY,
	email          TEXT NOT NULL UNIQUE COLLATE NOCASE,
	password_hash  TEXT NOT NULL,
	platform_admin INTEGER NOT NULL DEFAULT 0 CHECK (platform_admin IN (0, 1)),
	created_at     INTEGER NOT NULL
);

CREATE TABLE memberships (
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	account_id   TEXT NOT NULL REFERENCES accounts (id),
	role         TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'MEMBER')),
	PRIMARY KEY (workspace_id, account_id)
);
CREATE INDEX memberships_account ON memberships (account_id);

CREATE TABLE sessions (
	id            TEXT PRIMARY KEY,
	account_id    TEXT NOT NULL REFERENCES accounts (id),
	workspace_id  TEXT REFERENCES workspaces (id),
	impersonating INTEGER NOT NULL DEFAULT 0 CHECK (impersonating IN (0, 1)),
	created_at    INTEGER NOT NULL,
	expires_at    INTEGER NOT NULL,
	revoked_at    INTEGER
);
CREATE INDEX sessions_account ON sessions (account_id);

CREATE TABLE api_keys (
	seq                   INTEGER PRIMARY KEY,
	id                    TEXT NOT NULL UNIQUE,
	workspace_id          TEXT NOT NULL REFERENCES workspaces (id),
	name                  TEXT NOT NULL,
	hash                  BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
	display_prefix        TEXT NOT NULL,
	hint                  TEXT NOT NULL,
	rate_limit_per_minute INTEGER,
	rate_limit_per_day    INTEGER,
	expires_at            INTEGER,
	scopes                TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
	created_at            INTEGER NOT NULL,
	created_by            TEXT,
	last_used_at          INTEGER,
	revoked_at            INTEGER,
	revoked_by            TEXT,
	-- Rotation links carry no foreign key: the service may write the two keys
	-- of a rotation in either order, and keys are never deleted.
	rotated_from_id       TEXT,
	replaced_by_id        TEXT,
	day_state             INTEGER NOT NULL DEFAULT 0
);
-- A name is unique among the workspace's non-revoked keys, also under
-- concurrent writers; it is free again once the key is revoked.
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (workspace_id, name) WHERE revoked_at IS NULL;
-- Paging newest first (seq is the rowid, so these are ordered by it).
CREATE INDEX api_keys_workspace ON api_keys (workspace_id, seq);
CREATE INDEX api_keys_workspace_active ON api_keys (workspace_id, seq) WHERE revoked_at IS NULL;

-- The key-specific audit table (btk.AuditEntry).
CREATE TABLE api_key_audit (
	seq             INTEGER PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	workspace_id    TEXT NOT NULL REFERENCES workspaces (id),
	action          TEXT NOT NULL CHECK (action IN ('CREATED', 'ROTATED', 'REVOKED', 'REVOKED_ALL')),
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
CREATE INDEX api_key_audit_workspace ON api_key_audit (workspace_id, seq);
CREATE INDEX api_key_audit_key ON api_key_audit (api_key_id) WHERE api_key_id IS NOT NULL;
CREATE INDEX api_key_audit_new_key ON api_key_audit (new_api_key_id) WHERE new_api_key_id IS NOT NULL;

-- The workspace Audit Log (btk.AuditEvent).
CREATE TABLE audit_events (
	seq             INTEGER PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	workspace_id    TEXT REFERENCES workspaces (id),
	action          TEXT NOT NULL,
	actor_id        TEXT,
	actor_email     TEXT NOT NULL,
	impersonator_id TEXT,
	target_type     TEXT NOT NULL,
	target_id       TEXT,
	metadata        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
	created_at      INTEGER NOT NULL
);
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, seq);
