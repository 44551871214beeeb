package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/client"
)

// How btk shows the schema's objects to people. -o json uses the generated
// types as they are: their JSON is the schema's.

func keyDisplay(k client.ApiKey) string { return k.DisplayPrefix + "_…" + k.Hint }

func scopes(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

func limit(n *int, none string) string {
	if n == nil {
		return none
	}
	return strconv.Itoa(*n)
}

func deref(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}

func (p *printer) apiKeyFields(k client.ApiKey) []field {
	fields := []field{
		{"Name", k.Name},
		{"ID", k.Id},
		{"Key", keyDisplay(k)},
		{"Status", p.Status(string(k.Status))},
		{"Rate limit", fmt.Sprintf("%s/min, %s/day", limit(k.RateLimitPerMinute, "default"), limit(k.RateLimitPerDay, "default"))},
		{"Expires", p.Time(k.ExpiresAt, "never")},
		{"Scopes", scopes(k.Scopes)},
		{"Created", p.Time(&k.CreatedAt, "")},
		{"Last used", p.Time(k.LastUsedAt, "never")},
	}
	if k.RevokedAt != nil {
		fields = append(fields, field{"Revoked", p.Time(k.RevokedAt, "")})
	}
	if k.RotatedFromId != nil {
		fields = append(fields, field{"Rotated from", *k.RotatedFromId})
	}
	if k.ReplacedById != nil {
		fields = append(fields, field{"Replaced by", *k.ReplacedById})
	}
	return fields
}

func (p *printer) apiKeyTable(keys []client.ApiKey) {
	rows := make([][]string, len(keys))
	for i, k := range keys {
		rows[i] = []string{k.Name, k.Id, keyDisplay(k), p.Status(string(k.Status)), p.Time(k.ExpiresAt, "never"), p.Time(k.LastUsedAt, "never")}
	}
	p.Table([]string{"NAME", "ID", "KEY", "STATUS", "EXPIRES", "LAST USED"}, rows)
}

func (p *printer) tenantFields(t client.Tenant) []field {
	return []field{
		{"Name", t.Name},
		{"ID", t.Id},
		{"Prefix", t.Prefix},
		{"Plan", string(t.Plan)},
		{"Public client key", t.PublicClientKey},
		{"Default rate limit", fmt.Sprintf("%d/min, %d/day", t.DefaultRateLimitPerMinute, t.DefaultRateLimitPerDay)},
		{"Created", p.Time(&t.CreatedAt, "")},
	}
}

func (p *printer) tenantTable(ts []client.Tenant) {
	rows := make([][]string, len(ts))
	for i, t := range ts {
		rows[i] = []string{t.Name, t.Id, string(t.Plan), fmt.Sprintf("%d/min, %d/day", t.DefaultRateLimitPerMinute, t.DefaultRateLimitPerDay), p.Time(&t.CreatedAt, "")}
	}
	p.Table([]string{"NAME", "ID", "PLAN", "DEFAULT RATE LIMIT", "CREATED"}, rows)
}

func (p *printer) accountFields(a client.Account) []field {
	role := "none"
	if a.Role != nil {
		role = string(*a.Role)
	}
	return []field{
		{"Email", a.Email},
		{"ID", a.Id},
		{"Platform admin", strconv.FormatBool(a.PlatformAdmin)},
		{"Role", role},
	}
}

func (p *printer) auditTable(entries []client.AuditEntry) {
	rows := make([][]string, len(entries))
	for i, e := range entries {
		key := deref(e.ApiKeyName, deref(e.ApiKeyId, "-"))
		var detail []string
		if e.NewApiKeyId != nil {
			detail = append(detail, "new key "+*e.NewApiKeyId)
		}
		if e.RevokedCount != nil {
			detail = append(detail, fmt.Sprintf("%d keys revoked", *e.RevokedCount))
		}
		if e.ImpersonatorId != nil {
			detail = append(detail, "impersonated by "+*e.ImpersonatorId)
		}
		rows[i] = []string{p.Time(&e.CreatedAt, ""), string(e.Action), key, e.ActorEmail, e.Ip, strings.Join(detail, "; ")}
	}
	p.Table([]string{"TIME", "ACTION", "KEY", "ACTOR", "IP", "DETAIL"}, rows)
}

// session shows a session that was saved to the config file; never its token.
func (p *printer) session(s client.Session, server, cfgPath string) error {
	switch p.format {
	case formatJSON:
		return p.JSON(sessionView{ExpiresAt: s.ExpiresAt, Account: s.Account, Workspace: s.Workspace})
	case formatPlain:
	default:
		ws := "none"
		if s.Workspace != nil {
			ws = s.Workspace.Name
		}
		p.Notice("Logged in to %s as %s, workspace %s; session saved to %s", server, s.Account.Email, ws, cfgPath)
	}
	return nil
}

// sessionView is a Session without its token, for showing after login.
type sessionView struct {
	ExpiresAt time.Time      `json:"expiresAt"`
	Account   client.Account `json:"account"`
	Workspace *client.Tenant `json:"workspace"`
}
