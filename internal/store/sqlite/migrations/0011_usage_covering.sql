-- 0011: a workspace's usage reads (its series and top keys) find every
-- column they need in this index, in hour order, instead of looking each
-- hourly row up in the table (docs/usage.md#what-the-reads-cost). It
-- replaces the index on (workspace_id, hour).
CREATE INDEX api_key_usage_workspace_covering ON api_key_usage (workspace_id, hour, api_key_id, accepted, rate_limited, refused);
DROP INDEX api_key_usage_workspace;
