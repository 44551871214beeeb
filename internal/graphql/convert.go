package graphql

import (
	"time"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/graphql/graph"
)

// Conversions from domain records to GraphQL models. Empty optional ids
// become null.

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func pageInfo(next string) *graph.PageInfo {
	return &graph.PageInfo{HasNextPage: next != "", EndCursor: optString(next)}
}

func (r *Resolver) tenant(w *btk.Workspace) *graph.Tenant {
	if w == nil {
		return nil
	}
	perMinute, perDay := r.svc.WorkspaceLimits(w)
	return &graph.Tenant{
		ID: w.ID, Name: w.Name, Prefix: w.Prefix(), Plan: w.Plan, PublicClientKey: w.PublicClientKey,
		DefaultRateLimitPerMinute: perMinute, DefaultRateLimitPerDay: perDay, CreatedAt: w.CreatedAt,
		KeyPolicy: &graph.KeyPolicy{
			MaxLifetimeDays: w.KeyPolicy.MaxLifetimeDays, RevokeUnusedAfterDays: w.KeyPolicy.RevokeUnusedAfterDays,
		},
	}
}

func account(a *btk.Account, role btk.Role) *graph.Account {
	out := &graph.Account{ID: a.ID, Email: a.Email, PlatformAdmin: a.PlatformAdmin, Memberships: []*graph.Membership{},
		Disabled: a.DisabledAt != nil}
	if role != "" {
		r := role
		out.Role = &r
	}
	return out
}

func apiKey(k *btk.APIKey, now time.Time) *graph.APIKey {
	return &graph.APIKey{
		ID: k.ID, Name: k.Name, DisplayPrefix: k.DisplayPrefix, Hint: k.Hint,
		Status:             k.Status(now),
		RateLimitPerMinute: k.RateLimitPerMinute, RateLimitPerDay: k.RateLimitPerDay,
		ExpiresAt: k.ExpiresAt, EffectiveExpiresAt: k.EffectiveExpiresAt(), Scopes: nonNil(k.Scopes), AllowedCidrs: nonNil(k.AllowedCIDRs), CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt,
		RevokedAt: k.RevokedAt, RotatedFromID: optString(k.RotatedFromID), ReplacedByID: optString(k.ReplacedByID),
		Canary: k.Canary,
	}
}

func auditEntry(e *btk.AuditEntry) *graph.APIKeyAuditEntry {
	return &graph.APIKeyAuditEntry{
		ID: e.ID, WorkspaceID: e.WorkspaceID, Action: e.Action,
		APIKeyID: optString(e.APIKeyID), APIKeyName: optString(e.APIKeyName), NewAPIKeyID: optString(e.NewAPIKeyID),
		RevokedCount: e.RevokedCount, ActorID: e.ActorID, ActorEmail: e.ActorEmail,
		ImpersonatorID: optString(e.ImpersonatorID), ImpersonatorEmail: optString(e.ImpersonatorEmail), IP: e.IP, UserAgent: e.UserAgent, CreatedAt: e.CreatedAt,
	}
}

func chainCoverage(c *btk.ChainCoverage) *graph.RotationChainCoverage {
	if c == nil {
		return nil
	}
	return &graph.RotationChainCoverage{Keys: c.Keys, OldestKeyID: c.OldestID, NewestKeyID: c.NewestID, OlderCut: c.OlderCut, NewerCut: c.NewerCut}
}

func auditEvent(e *btk.AuditEvent) *graph.AuditEvent {
	return &graph.AuditEvent{
		ID: e.ID, WorkspaceID: e.WorkspaceID, Action: e.Action, ActorID: e.ActorID, ActorEmail: e.ActorEmail,
		ImpersonatorID: optString(e.ImpersonatorID), ImpersonatorEmail: optString(e.ImpersonatorEmail), TargetType: e.TargetType, TargetID: e.TargetID,
		Metadata: e.Metadata, CreatedAt: e.CreatedAt,
	}
}

func (r *Resolver) session(s *btk.SessionInfo) *graph.Session {
	acct := account(s.Account, s.Role)
	if s.Memberships != nil {
		acct.Memberships = memberships(s.Memberships)
	}
	return &graph.Session{
		AccessToken: s.Token, ExpiresAt: s.ExpiresAt, Account: acct, Workspace: r.tenant(s.Workspace),
		DeviceToken: optString(s.DeviceToken),
	}
}

func memberships(ms []btk.MembershipInfo) []*graph.Membership {
	return mapSlice(ms, func(m btk.MembershipInfo) *graph.Membership {
		return &graph.Membership{WorkspaceID: m.WorkspaceID, WorkspaceName: m.WorkspaceName, Role: m.Role}
	})
}

func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func page(first *int, after *string) btk.Page {
	p := btk.Page{First: btk.DefaultPageSize}
	if first != nil {
		p.First = *first
	}
	if after != nil {
		p.After = *after
	}
	return p
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
