package client

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/Khan/genqlient/graphql"
)

// pageSize is how many nodes one request asks for while following pages; the
// server allows at most 500.
const pageSize = 500

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// IsID reports whether s has the shape of an object id (a UUID).
func IsID(s string) bool { return uuidRE.MatchString(s) }

// ResolveKey finds the key a command-line KEY argument means: a key id (a
// UUID), or otherwise the name of an active key. A key that does not exist
// or is not visible is a NOT_FOUND *Error.
func ResolveKey(ctx context.Context, c graphql.Client, ref string) (ApiKey, error) {
	if IsID(ref) {
		resp, err := GetApiKey(ctx, c, ref)
		if err != nil {
			return ApiKey{}, err
		}
		if resp.ApiKey == nil {
			return ApiKey{}, &Error{Code: "NOT_FOUND", Message: fmt.Sprintf("no API key with id %s", ref)}
		}
		return *resp.ApiKey, nil
	}
	keys, err := AllApiKeys(ctx, c, false)
	if err != nil {
		return ApiKey{}, err
	}
	for _, k := range keys {
		if k.Name == ref && k.Status == ApiKeyStatusActive {
			return k, nil
		}
	}
	return ApiKey{}, &Error{Code: "NOT_FOUND", Message: fmt.Sprintf("no active API key named %q", ref)}
}

// AllApiKeys returns every key of the caller's workspace, following pages:
// the keys not revoked, or with includeRevoked every key.
func AllApiKeys(ctx context.Context, c graphql.Client, includeRevoked bool) ([]ApiKey, error) {
	keys := []ApiKey{}
	var after *string
	for {
		resp, err := ApiKeys(ctx, c, includeRevoked, pageSize, after)
		if err != nil {
			return nil, err
		}
		keys = append(keys, resp.ApiKeys.Nodes...)
		page := resp.ApiKeys.PageInfo
		if !page.HasNextPage || page.EndCursor == nil {
			return keys, nil
		}
		after = page.EndCursor
	}
}

// AuditFilter narrows the key audit log; nil fields do not filter.
type AuditFilter struct {
	WorkspaceID *string
	ApiKeyID    *string
	Action      *ApiKeyAuditAction
	Since       *time.Time
}

// AuditLog returns up to limit entries of the key audit log, newest first,
// following pages.
func AuditLog(ctx context.Context, c graphql.Client, f AuditFilter, limit int) ([]AuditEntry, error) {
	entries := []AuditEntry{}
	var after *string
	for len(entries) < limit {
		resp, err := ApiKeyAuditLog(ctx, c, f.WorkspaceID, f.ApiKeyID, f.Action, f.Since, min(limit-len(entries), pageSize), after)
		if err != nil {
			return nil, err
		}
		log := resp.ApiKeyAuditLog
		entries = append(entries, log.Nodes...)
		if !log.PageInfo.HasNextPage || log.PageInfo.EndCursor == nil {
			break
		}
		after = log.PageInfo.EndCursor
	}
	if len(entries) > limit {
		entries = entries[:limit]
	}
	return entries, nil
}

// ResolveWorkspaceID finds the workspace a command-line WORKSPACE argument
// means: an id (a UUID) as it is, or otherwise a workspace name, looked up
// with the workspaces query (platform admin).
func ResolveWorkspaceID(ctx context.Context, c graphql.Client, ref string) (string, error) {
	if IsID(ref) {
		return ref, nil
	}
	resp, err := Workspaces(ctx, c)
	if err != nil {
		return "", err
	}
	var id string
	for _, w := range resp.Workspaces {
		if w.Name != ref {
			continue
		}
		if id != "" {
			return "", &Error{Code: "BAD_USER_INPUT", Message: fmt.Sprintf("several workspaces are named %q: use the id", ref)}
		}
		id = w.Id
	}
	if id == "" {
		return "", &Error{Code: "NOT_FOUND", Message: fmt.Sprintf("no workspace named %q", ref)}
	}
	return id, nil
}
