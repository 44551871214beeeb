-- 0011, as the SQLite store's: a workspace's usage reads (its series and top
-- keys) find every column they need in this index (an index-only scan on
-- the pages that VACUUM marked all-visible) instead of reading each hourly
-- row from the table (docs/usage.md#what-the-reads-cost). It replaces the
-- index on (workspace_id, hour); it is built before the old one is dropped,
-- so reads go on during the build.
CREATE INDEX api_key_usage_workspace_covering ON api_key_usage (workspace_id, hour) INCLUDE (api_key_id, accepted, rate_limited, refused);
DROP INDEX api_key_usage_workspace;
