package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
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
	name := strings.TrimSpace(norm.NFC.String(ref)) // as the server stores names
	var found *ApiKey
	err := eachApiKey(ctx, c, false, func(keys []ApiKey) (bool, error) {
		for i := range keys {
			if keys[i].Name == name && keys[i].Status != ApiKeyStatusRevoked { // names are unique among keys not revoked
				k := keys[i]
				found = &k
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return ApiKey{}, err
	}
	if found != nil {
		return *found, nil
	}
	return ApiKey{}, &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no API key named %q (a revoked key is known by its id only: see 'btk list --all')", ref)}
}

// AllApiKeys returns every key of the caller's workspace, following pages:
// the keys not revoked, or with includeRevoked every key. It keeps what it
// returns, so past MaxKeptNodes keys or MaxKeptBytes of answers it fails
// with TOO_LARGE; EachApiKey keeps nothing.
func AllApiKeys(ctx context.Context, c graphql.Client, includeRevoked bool) ([]ApiKey, error) {
	keys := []ApiKey{}
	err := follow(ctx, bound{MaxKeptNodes, CodeTooLarge, "keys to hold in memory", true}, apiKeysPage(c, includeRevoked), func(page []ApiKey) (bool, error) {
		keys = append(keys, page...)
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// EachApiKey calls each with every page of the caller's workspace's keys
// (as AllApiKeys), one page at a time, until the last page or an error of
// each's, which it returns. It keeps no page: past MaxKeptNodes keys not
// revoked it fails with BAD_RESPONSE (a workspace holds no more), past
// MaxListedKeys keys with TOO_LARGE.
func EachApiKey(ctx context.Context, c graphql.Client, includeRevoked bool, each func([]ApiKey) error) error {
	return eachApiKey(ctx, c, includeRevoked, func(page []ApiKey) (bool, error) { return false, each(page) })
}

// eachApiKey is EachApiKey whose each may stop early (true).
func eachApiKey(ctx context.Context, c graphql.Client, includeRevoked bool, each func([]ApiKey) (bool, error)) error {
	b := bound{MaxKeptNodes, CodeBadResponse, "keys not revoked, more than a workspace holds", false}
	if includeRevoked {
		b = bound{MaxListedKeys, CodeTooLarge, "keys, more than btk lists", false}
	}
	return follow(ctx, b, apiKeysPage(c, includeRevoked), each)
}

func apiKeysPage(c graphql.Client, includeRevoked bool) func(context.Context, *string) ([]ApiKey, PageInfo, error) {
	return func(ctx context.Context, after *string) ([]ApiKey, PageInfo, error) {
		resp, err := ApiKeys(ctx, c, includeRevoked, pageSize, after)
		if err != nil {
			return nil, PageInfo{}, err
		}
		return resp.ApiKeys.Nodes, resp.ApiKeys.PageInfo, nil
	}
}

// Bounds on the lists a command follows page by page
// (docs/design.md#long-lists). Each answer is bounded (MaxResponseBytes),
// but a hostile or broken server may say that another page follows for
// ever: these bound the command.
const (
	// MaxKeptNodes is the most nodes a command keeps from the pages it
	// follows (a table's rows, --limit): a workspace has at most 100,000
	// keys that are not revoked (docs/security.md).
	MaxKeptNodes = 100_000
	// MaxKeptBytes is the most bytes of answers whose nodes a command
	// keeps: MaxKeptNodes alone bounds nothing when each node is a large
	// answer of its own. 100,000 keys of a few scopes each are about 50 MB
	// of answers.
	MaxKeptBytes = 128 << 20
	// MaxListedKeys is the most keys, revoked ones included, a command
	// goes through a page at a time (btk list --all -o json): revoked keys
	// stay as the record, so nothing else bounds them.
	MaxListedKeys = 10_000_000
	// MaxPages is the most pages a command follows: MaxListedKeys at 250
	// a page.
	MaxPages = MaxListedKeys / pageSize
)

// bound is what one list followed page by page may be.
type bound struct {
	nodes int      // the most nodes
	code  btk.Code // past them: TOO_LARGE for the client's own bound, BAD_RESPONSE for one no btk server passes
	what  string   // what the nodes are, for that error
	keep  bool     // the caller keeps every node: MaxKeptBytes applies too
}

// follow asks page for one page after another, from the first, and hands
// each its nodes, until the last page or each stops it (true) or fails.
// More nodes than b allows is an *Error of b.code; with b.keep, more than
// MaxKeptBytes of answers is TOO_LARGE. A page that says another follows but
// holds no node, or whose cursor came before, would repeat for ever: that
// is a BAD_RESPONSE *Error, and so is a list of more than MaxPages pages.
func follow[T any](ctx context.Context, b bound, page func(ctx context.Context, after *string) ([]T, PageInfo, error), each func([]T) (bool, error)) error {
	var answers int64 // the bytes of the answers so far (*Client counts them)
	ctx = countAnswers(ctx, &answers)
	seed := maphash.MakeSeed()
	seen := map[uint64]bool{} // the cursors so far, hashed: a cursor may be as long as an answer
	nodes := 0
	var after *string
	for pages := 1; ; pages++ {
		got, info, err := page(ctx, after)
		if err != nil {
			return err
		}
		if nodes += len(got); nodes > b.nodes {
			msg := fmt.Sprintf("more than %d %s", b.nodes, b.what)
			if b.code == CodeBadResponse {
				msg = "unexpected answer: " + msg
			}
			return &Error{Code: b.code, Message: msg}
		}
		if b.keep && answers > MaxKeptBytes {
			return &Error{Code: CodeTooLarge, Message: fmt.Sprintf("more than %d MiB of answers to hold in memory", MaxKeptBytes>>20)}
		}
		if stop, err := each(got); stop || err != nil {
			return err
		}
		if !info.HasNextPage || info.EndCursor == nil {
			return nil
		}
		h := maphash.String(seed, *info.EndCursor)
		switch {
		case len(got) == 0:
			return &Error{Code: CodeBadResponse, Message: fmt.Sprintf("unexpected answer: page %d holds nothing but says another follows", pages)}
		case seen[h]:
			return &Error{Code: CodeBadResponse, Message: fmt.Sprintf("unexpected answer: page %d says the next page is one already read", pages)}
		case pages >= MaxPages:
			return &Error{Code: CodeBadResponse, Message: fmt.Sprintf("unexpected answer: more than %d pages", MaxPages)}
		}
		seen[h] = true
		after = info.EndCursor
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
	entries, more, err = firstN(ctx, limit, func(ctx context.Context, first int, after *string) ([]AuditEntry, PageInfo, error) {
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
	return firstN(ctx, limit, func(ctx context.Context, first int, after *string) ([]AuditEvent, PageInfo, error) {
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
	return firstN(ctx, limit, func(ctx context.Context, first int, after *string) ([]WebhookDelivery, PageInfo, error) {
		resp, err := WebhookDeliveries(ctx, c, webhookID, first, after)
		if err != nil {
			return nil, PageInfo{}, err
		}
		return resp.WebhookDeliveries.Nodes, resp.WebhookDeliveries.PageInfo, nil
	})
}

// firstN follows the pages page returns until it has limit nodes or none
// are left; more reports whether nodes beyond the limit exist. It asks for
// one more than the limit, to tell whether the limit cut the list. It keeps
// the nodes: the caller bounds limit (MaxKeptNodes).
func firstN[T any](ctx context.Context, limit int, page func(ctx context.Context, first int, after *string) ([]T, PageInfo, error)) (nodes []T, more bool, err error) {
	nodes = []T{}
	// It asks for at most limit+1: more is a server's mistake.
	err = follow(ctx, bound{limit + 1, CodeBadResponse, "items, more than were asked for", true}, func(ctx context.Context, after *string) ([]T, PageInfo, error) {
		return page(ctx, min(limit+1-len(nodes), pageSize), after)
	}, func(got []T) (bool, error) {
		nodes = append(nodes, got...)
		return len(nodes) > limit, nil
	})
	if err != nil {
		return nil, false, err
	}
	if len(nodes) > limit {
		return nodes[:limit], true, nil
	}
	return nodes, false, nil
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
	name := strings.TrimSpace(norm.NFC.String(ref))
	var newest *ApiKey
	err = eachApiKey(ctx, c, true, func(keys []ApiKey) (bool, error) {
		for i := range keys {
			if keys[i].Name == name && (newest == nil || keys[i].CreatedAt.After(newest.CreatedAt)) {
				k := keys[i] // not the page, which goes
				newest = &k
			}
		}
		return false, nil
	})
	if err != nil {
		return ApiKey{}, err
	}
	if newest == nil {
		return ApiKey{}, &Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no API key named %q, active or revoked", ref)}
	}
	return *newest, nil
}
