package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"golang.org/x/text/unicode/norm"

	"github.com/btk-project/btk/internal/btk"
)

// pageSize is how many nodes one request asks for while following pages.
// The server allows 500, but a page costs its fields for every 20 rows
// (docs/security.md): 500 keys of the ApiKey fragment's 21 fields would
// exceed the operation limit of 500, 250 leave room for more fields.
const pageSize = 250

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// IsID reports whether s has the shape of an object id (a UUID).
func IsID(s string) bool { return uuidRE.MatchString(s) }

// ResolveKey finds the key a command-line KEY argument means: a key id (a
// UUID), or otherwise the name of a key that is not revoked (active or
// expired: an expired key keeps its name until it is revoked). A key that
// does not exist or is not visible is a NOT_FOUND *Error.
func ResolveKey(ctx context.Context, c graphql.Client, ref string) (ApiKey, error) {
	if IsID(ref) {
		resp, err := GetApiKey(ctx, c, ref)
		if err != nil {
			return ApiKey{}, err
		}
		if resp.ApiKey == nil {
			return ApiKey{}, &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no API key with id %s", ref)}
		}
		return *resp.ApiKey, nil
	}
	keys, err := AllApiKeys(ctx, c, false)
	if err != nil {
		return ApiKey{}, err
	}
	name := strings.TrimSpace(norm.NFC.String(ref)) // as the server stores names
	for _, k := range keys {
		if k.Name == name && k.Status != ApiKeyStatusRevoked { // names are unique among keys not revoked
			return k, nil
		}
	}
	return ApiKey{}, &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no API key named %q (a revoked key is known by its id only: see 'btk list --all')", ref)}
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

// AuditFilter narrows the key audit log and the audit events; nil fields
// do not filter.
type AuditFilter struct {
	WorkspaceID *string
	ApiKeyID    *string
	Action      *ApiKeyAuditAction
	EventAction *string // AuditEvents only
	ServerWide  bool    // AuditEvents only
	ActorEmail  *string
	Since       *time.Time
	Until       *time.Time
}

// AuditLog returns up to limit entries of the key audit log, newest first,
// following pages; more reports whether entries beyond the limit exist.
// With f.ApiKeyID, chain is the part of the key's rotation chain the
// entries cover (nil for an unknown key).
func AuditLog(ctx context.Context, c graphql.Client, f AuditFilter, limit int) (entries []AuditEntry, more bool, chain *RotationChainCoverage, err error) {
	entries, more, err = firstN(limit, func(first int, after *string) ([]AuditEntry, PageInfo, error) {
		resp, err := ApiKeyAuditLog(ctx, c, f.WorkspaceID, f.ApiKeyID, f.Action, f.Since, f.Until, f.ActorEmail, first, after)
		if err != nil {
			return nil, PageInfo{}, err
		}
		chain = resp.ApiKeyAuditLog.RotationChain
		return resp.ApiKeyAuditLog.Nodes, resp.ApiKeyAuditLog.PageInfo, nil
	})
	return entries, more, chain, err
}

// EventLog returns up to limit audit events, newest first, following pages;
// more reports whether events beyond the limit exist.
func EventLog(ctx context.Context, c graphql.Client, f AuditFilter, limit int) (events []AuditEvent, more bool, err error) {
	return firstN(limit, func(first int, after *string) ([]AuditEvent, PageInfo, error) {
		resp, err := AuditEvents(ctx, c, f.WorkspaceID, f.ServerWide, f.EventAction, f.ActorEmail, f.Since, f.Until, first, after)
		if err != nil {
			return nil, PageInfo{}, err
		}
		return resp.AuditEvents.Nodes, resp.AuditEvents.PageInfo, nil
	})
}

// DeliveryLog returns up to limit deliveries of a webhook, newest first,
// following pages; more reports whether deliveries beyond the limit exist.
func DeliveryLog(ctx context.Context, c graphql.Client, webhookID string, limit int) (deliveries []WebhookDelivery, more bool, err error) {
	return firstN(limit, func(first int, after *string) ([]WebhookDelivery, PageInfo, error) {
		resp, err := WebhookDeliveries(ctx, c, webhookID, first, after)
		if err != nil {
			return nil, PageInfo{}, err
		}
		return resp.WebhookDeliveries.Nodes, resp.WebhookDeliveries.PageInfo, nil
	})
}

// firstN follows the pages page returns until it has limit nodes or none
// are left; more reports whether nodes beyond the limit exist. It asks for
// one more than the limit, to tell whether the limit cut the list.
func firstN[T any](limit int, page func(first int, after *string) ([]T, PageInfo, error)) (nodes []T, more bool, err error) {
	nodes = []T{}
	var after *string
	for {
		got, info, err := page(min(limit+1-len(nodes), pageSize), after)
		if err != nil {
			return nil, false, err
		}
		nodes = append(nodes, got...)
		if len(nodes) > limit {
			return nodes[:limit], true, nil
		}
		if !info.HasNextPage || info.EndCursor == nil {
			return nodes, false, nil
		}
		after = info.EndCursor
	}
}

// ResolveWorkspaceID finds the workspace a command-line WORKSPACE argument
// means: an id (a UUID) as it is, or otherwise a workspace name, looked up
// first among the caller's memberships (me), then, for a platform admin,
// among every workspace.
func ResolveWorkspaceID(ctx context.Context, c graphql.Client, ref string) (string, error) {
	if IsID(ref) {
		return ref, nil
	}
	me, err := Me(ctx, c)
	if err != nil {
		return "", err
	}
	var names []named
	for _, m := range me.Me.Memberships {
		names = append(names, named{m.WorkspaceId, m.WorkspaceName})
	}
	if id, err := pickName(names, ref); err == nil || !me.Me.PlatformAdmin {
		return id, err
	}
	resp, err := Workspaces(ctx, c)
	if err != nil {
		return "", err
	}
	names = names[:0]
	for _, w := range resp.Workspaces {
		names = append(names, named{w.Id, w.Name})
	}
	return pickName(names, ref)
}

type named struct{ id, name string }

// pickName matches a name exactly, else case-insensitively when that is unique.
func pickName(list []named, ref string) (string, error) {
	ref = strings.TrimSpace(norm.NFC.String(ref)) // as the server stores names
	var exact, folded []string
	for _, n := range list {
		if n.name == ref {
			exact = append(exact, n.id)
		} else if strings.EqualFold(n.name, ref) {
			folded = append(folded, n.id)
		}
	}
	if len(exact) == 0 {
		exact = folded
	}
	switch len(exact) {
	case 0:
		return "", &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no workspace named %q among yours", ref)}
	case 1:
		return exact[0], nil
	}
	return "", &Error{Code: btk.CodeBadUserInput, Message: fmt.Sprintf("several workspaces are named %q: use the id", ref)}
}

// KeyHash is the hex SHA-256 of a plaintext key: what apiKeyByHash takes.
// The plaintext itself never leaves the machine.
func KeyHash(plaintext string) string {
	h := sha256.Sum256([]byte(plaintext))
	return hex.EncodeToString(h[:])
}

// ResolveKeyBySecret finds the key whose plaintext is given, by its hash. A
// key that does not exist or is not visible is a NOT_FOUND *Error (the
// server never says which).
func ResolveKeyBySecret(ctx context.Context, c graphql.Client, plaintext string) (*ApiKeyByHashApiKeyByHashApiKey, error) {
	resp, err := ApiKeyByHash(ctx, c, KeyHash(plaintext))
	if err != nil {
		return nil, err
	}
	if resp.ApiKeyByHash == nil {
		return nil, &Error{Code: btk.CodeNotFound, Message: "no API key with that secret is visible to you"}
	}
	return resp.ApiKeyByHash, nil
}

// ResolveKeyForAudit is ResolveKey that also finds a name whose keys are all
// revoked: then the newest key of that name (its rotation chain is the
// latest of the name). btk revoke resolves by it too, so that a revoke
// repeated after UNAVAILABLE finds the key it revoked.
func ResolveKeyForAudit(ctx context.Context, c graphql.Client, ref string) (ApiKey, error) {
	k, err := ResolveKey(ctx, c, ref)
	var ce *Error
	if err == nil || IsID(ref) || !errors.As(err, &ce) || ce.Code != btk.CodeNotFound {
		return k, err
	}
	keys, err := AllApiKeys(ctx, c, true)
	if err != nil {
		return ApiKey{}, err
	}
	name := strings.TrimSpace(norm.NFC.String(ref))
	var newest *ApiKey
	for i := range keys {
		if keys[i].Name == name && (newest == nil || keys[i].CreatedAt.After(newest.CreatedAt)) {
			newest = &keys[i]
		}
	}
	if newest == nil {
		return ApiKey{}, &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no API key named %q, active or revoked", ref)}
	}
	return *newest, nil
}
