-- 0001: initial schema, the same tables and rules as the SQLite store's 0001.
--
-- Times are BIGINT unix nanoseconds (UTC), as in SQLite: they round-trip
-- exactly (timestamptz keeps microseconds only) and both engines refuse the
-- same range. Optional ids are NULL, never ''. Tables that are paged or
-- listed in insertion order have a seq identity column; their public UUID
-- lives in a separate UNIQUE id column.

CREATE TABLE settings (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);

CREATE TABLE workspaces (
	seq                   BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
	id                    TEXT PRIMARY KEY,
	name                  TEXT NOT NULL,
	prefix                TEXT NOT NULL CHECK (length(prefix) = 8),
	plan                  TEXT NOT NULL CHECK (plan IN ('CLOUD_STARTER', 'CLOUD_PRO', 'CLOUD_ENTERPRISE', 'SELF_HOSTED')),
	public_client_key     TEXT NOT NULL UNIQUE,
	rate_limit_per_minute BIGINT,
	rate_limit_per_day    BIGINT,
	created_at            BIGINT NOT NULL,
	CHECK (substr(id, 1, 8) = prefix),
	CONSTRAINT workspaces_prefix UNIQUE (prefix)
);

CREATE TABLE accounts (
	seq            BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
	id             TEXT PRIMARY KEY,
	email          TEXT NOT NULL,
	password_hash  TEXT NOT NULL,
	platform_admin BOOLEAN NOT NULL DEFAULT false,
	created_at     BIGINT NOT NULL
);
-- Case-insensitive like SQLite's NOCASE (the service lowercases emails too).
CREATE UNIQUE INDEX accounts_email ON accounts (lower(email));

CREATE TABLE memberships (
	seq          BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
	workspace_id TEXT NOT NULL REFERENCES workspaces (id),
	account_id   TEXT NOT NULL REFERENCES accounts (id),
	role         TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'MEMBER')),
	PRIMARY KEY (workspace_id, account_id)
);
CREATE INDEX memberships_account ON memberships (account_id, seq);

CREATE TABLE sessions (
	id            TEXT PRIMARY KEY,
	account_id    TEXT NOT NULL REFERENCES accounts (id),
	workspace_id  TEXT REFERENCES workspaces (id),
	impersonating BOOLEAN NOT NULL DEFAULT false,
	created_at    BIGINT NOT NULL,
	expires_at    BIGINT NOT NULL,
	revoked_at    BIGINT
);
CREATE INDEX sessions_account ON sessions (account_id);
CREATE INDEX sessions_workspace_account ON sessions (workspace_id, account_id) WHERE revoked_at IS NULL;

CREATE TABLE api_keys (
	seq                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id                    TEXT NOT NULL UNIQUE,
	workspace_id          TEXT NOT NULL REFERENCES workspaces (id),
	name                  TEXT NOT NULL,
	hash                  BYTEA NOT NULL UNIQUE CHECK (length(hash) = 32),
	display_prefix        TEXT NOT NULL,
	hint                  TEXT NOT NULL,
	rate_limit_per_minute BIGINT,
	rate_limit_per_day    BIGINT,
	expires_at            BIGINT,
	scopes                JSON NOT NULL DEFAULT '[]' CHECK (json_typeof(scopes) = 'array'),
	created_at            BIGINT NOT NULL,
	created_by            TEXT,
	last_used_at          BIGINT,
	revoked_at            BIGINT,
	revoked_by            TEXT,
	-- Rotation links carry no foreign key: the service may write the two keys
	-- of a rotation in either order, and keys are never deleted.
	rotated_from_id       TEXT,
	replaced_by_id        TEXT,
	day_state             BIGINT NOT NULL DEFAULT 0
);
-- A name is unique among the workspace's non-revoked keys, also under
-- concurrent writers (a second insert waits for the first transaction and
-- fails if it commits); it is free again once the key is revoked.
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (workspace_id, name) WHERE revoked_at IS NULL;
CREATE INDEX api_keys_workspace ON api_keys (workspace_id, seq);
CREATE INDEX api_keys_workspace_active ON api_keys (workspace_id, seq) WHERE revoked_at IS NULL;

-- The key-specific audit table (btk.AuditEntry).
CREATE TABLE api_key_audit (
	seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	workspace_id    TEXT NOT NULL REFERENCES workspaces (id),
	action          TEXT NOT NULL CHECK (action IN ('CREATED', 'ROTATED', 'REVOKED', 'REVOKED_ALL')),
	api_key_id      TEXT,
	api_key_name    TEXT NOT NULL,
	new_api_key_id  TEXT,
	revoked_count   BIGINT,
	actor_id        TEXT,
	actor_email     TEXT NOT NULL,
	impersonator_id TEXT,
	ip              TEXT NOT NULL,
	user_agent      TEXT NOT NULL,
	created_at      BIGINT NOT NULL
);
CREATE INDEX api_key_audit_workspace ON api_key_audit (workspace_id, seq);
CREATE INDEX api_key_audit_key ON api_key_audit (api_key_id) WHERE api_key_id IS NOT NULL;
CREATE INDEX api_key_audit_new_key ON api_key_audit (new_api_key_id) WHERE new_api_key_id IS NOT NULL;

-- The workspace Audit Log (btk.AuditEvent). JSON (not JSONB) keeps the
-- metadata text exactly as written.
CREATE TABLE audit_events (
	seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id              TEXT NOT NULL UNIQUE,
	workspace_id    TEXT REFERENCES workspaces (id),
	action          TEXT NOT NULL,
	actor_id        TEXT,
	actor_email     TEXT NOT NULL,
	impersonator_id TEXT,
	target_type     TEXT NOT NULL,
	target_id       TEXT,
	metadata        JSON NOT NULL DEFAULT '{}',
	created_at      BIGINT NOT NULL
);
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, seq);
