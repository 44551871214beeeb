package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/client"
)

// How btk shows the schema's objects to people. -o json uses the generated
// types as they are: their JSON is the schema's.

func keyDisplay(k client.ApiKey) string { return k.DisplayPrefix + "_…" + k.Hint }

// keyHintOnly is keyDisplay without the display prefix, which every key of a
// workspace shares: "…" and the hint.
func keyHintOnly(cell string) string {
	if i := strings.Index(cell, "…"); i >= 0 {
		return cell[i:]
	}
	return cell
}

// shortTarget shortens an event target's UUID ("api_key 6f1c8f5e-2b0e-…")
// to its first 8 characters, as git shortens commits.
func shortTarget(cell string) string {
	typ, id, ok := strings.Cut(cell, " ")
	if !ok || len(id) != 36 || strings.Count(id, "-") != 4 {
		return cell
	}
	return typ + " " + id[:8]
}

func scopes(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

func networks(s []string) string {
	if len(s) == 0 {
		return "any"
	}
	return strings.Join(s, " ")
}

func days(n *int) string {
	if n == nil {
		return "off"
	}
	return strconv.Itoa(*n) + " days"
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
		{"Rate limit", p.keyLimits(k)},
		{"Expires", p.expiry(k)},
		{"Scopes", scopes(k.Scopes)},
		{"Networks", networks(k.AllowedCidrs)},
		{"Created", p.Time(&k.CreatedAt, "")},
		{"Last used", p.Time(k.LastUsedAt, "never")},
	}
	if k.Canary {
		fields = append(fields, field{"Canary", "yes: never accepted, every use recorded (api_key.canary_used)"})
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

// expiry is when k stops authenticating (effectiveExpiresAt), saying so
// when the workspace's maximum lifetime, not the key's own expiry, decides
// it (docs/access.md#workspace-key-policy).
func (p *printer) expiry(k client.ApiKey) string {
	s := p.Date(k.EffectiveExpiresAt, "never")
	if k.EffectiveExpiresAt != nil && (k.ExpiresAt == nil || !k.EffectiveExpiresAt.Equal(*k.ExpiresAt)) {
		s += " (workspace maximum lifetime)"
	}
	return s
}

// keyLimits shows the limits that apply to k: its own, else the workspace's
// (p.defaults, when the command read them), saying which is which.
func (p *printer) keyLimits(k client.ApiKey) string {
	window := func(own *int, def *int, unit string) string {
		switch {
		case own != nil:
			return fmt.Sprintf("%d/%s", *own, unit)
		case def != nil:
			return fmt.Sprintf("%d/%s (workspace default)", *def, unit)
		}
		return "workspace default/" + unit
	}
	var defMin, defDay *int
	if p.defaults != nil {
		defMin, defDay = &p.defaults.DefaultRateLimitPerMinute, &p.defaults.DefaultRateLimitPerDay
	}
	return window(k.RateLimitPerMinute, defMin, "min") + ", " + window(k.RateLimitPerDay, defDay, "day")
}

// apiKey shows k as 'btk show' does: as JSON, or its fields with the limits
// that apply to it (readDefaults).
func (p *printer) apiKey(ctx context.Context, c *client.Client, k client.ApiKey) error {
	p.readDefaults(ctx, c)
	return p.Object(k, p.apiKeyFields(k))
}

// readDefaults reads the workspace's default limits for keyLimits; without
// them (an error), keyLimits says "workspace default".
func (p *printer) readDefaults(ctx context.Context, c *client.Client) {
	if p.format == formatJSON {
		return
	}
	if resp, err := client.TenantInfo(ctx, c); err == nil {
		p.defaults = &resp.TenantInfo
	}
}

func (p *printer) apiKeyTable(keys []client.ApiKey) {
	rows := make([][]string, len(keys))
	for i, k := range keys {
		rows[i] = []string{k.Name, k.Id, keyDisplay(k), p.Status(string(k.Status)), p.Time(k.EffectiveExpiresAt, "never"), p.Time(k.LastUsedAt, "never")}
	}
	// On a narrow terminal (docs/design.md#narrow-terminals): the display
	// prefix, the same for every key of the workspace, goes first; then the
	// id, the times; NAME, KEY's hint and STATUS stay.
	p.Columns([]column{
		{header: "NAME", flex: true},
		{header: "ID", drop: 3},
		{header: "KEY", short: keyHintOnly},
		{header: "STATUS"},
		{header: "EXPIRES", drop: 1},
		{header: "LAST USED", drop: 2},
	}, rows)
}

func (p *printer) tenantFields(t client.Tenant) []field {
	return []field{
		{"Name", t.Name},
		{"ID", t.Id},
		{"Prefix", t.Prefix},
		{"Plan", string(t.Plan)},
		{"Public client key", t.PublicClientKey},
		{"Default rate limit", fmt.Sprintf("%d/min, %d/day", t.DefaultRateLimitPerMinute, t.DefaultRateLimitPerDay)},
		{"Key max lifetime", days(t.KeyPolicy.MaxLifetimeDays)},
		{"Revoke unused keys after", days(t.KeyPolicy.RevokeUnusedAfterDays)},
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

func (p *printer) accountTable(as []client.Account) {
	rows := make([][]string, len(as))
	for i, a := range as {
		rows[i] = []string{a.Email, a.Id, strconv.FormatBool(a.PlatformAdmin)}
	}
	p.Table([]string{"EMAIL", "ID", "PLATFORM ADMIN"}, rows)
}

func (p *printer) memberTable(ms []client.MembersMembersMember) {
	rows := make([][]string, len(ms))
	for i, m := range ms {
		rows[i] = []string{m.Email, m.AccountId, string(m.Role)}
	}
	p.Table([]string{"EMAIL", "ACCOUNT ID", "ROLE"}, rows)
}

// impersonator names the impersonating platform admin by email, else id;
// when the admin is the actor itself (as it always is today) it says so
// rather than name the same account twice.
func impersonator(email, id *string, actorEmail string) string {
	if email != nil && *email != "" && *email == actorEmail {
		return "as platform admin"
	}
	if email != nil && *email != "" {
		return "impersonated by " + *email
	}
	if id != nil {
		return "impersonated by " + *id
	}
	return ""
}

func (p *printer) auditTable(entries []client.AuditEntry) {
	rows := make([][]string, len(entries))
	for i, e := range entries {
		var detail []string
		if e.NewApiKeyId != nil {
			detail = append(detail, "new key "+*e.NewApiKeyId)
		}
		if e.RevokedCount != nil {
			detail = append(detail, fmt.Sprintf("%d keys revoked", *e.RevokedCount))
		}
		if s := impersonator(e.ImpersonatorEmail, e.ImpersonatorId, e.ActorEmail); s != "" {
			detail = append(detail, s)
		}
		rows[i] = []string{p.Time(&e.CreatedAt, ""), string(e.Action), deref(e.ApiKeyName, "-"), deref(e.ApiKeyId, "-"),
			e.ActorEmail, e.Ip, e.UserAgent, strings.Join(detail, "; ")}
	}
	p.Table([]string{"TIME", "ACTION", "KEY", "KEY ID", "ACTOR", "IP", "USER AGENT", "DETAIL"}, rows)
}

func (p *printer) eventTable(events []client.AuditEvent) {
	rows := make([][]string, len(events))
	for i, e := range events {
		detail := metadataText(e.Metadata)
		if s := impersonator(e.ImpersonatorEmail, e.ImpersonatorId, e.ActorEmail); s != "" {
			detail = strings.TrimPrefix(detail+"; "+s, "; ")
		}
		ws := e.WorkspaceId
		if ws == "" {
			ws = "-"
		}
		rows[i] = []string{p.Time(&e.CreatedAt, ""), e.Action, e.ActorEmail, e.TargetType + " " + e.TargetId, ws, detail}
	}
	// On a narrow terminal: the workspace (one id repeated on every row of a
	// workspace's events) goes first, a target's id is shortened, then the
	// target goes (a key's DETAIL names it); DETAIL is cut before TIME,
	// ACTION and ACTOR.
	p.Columns([]column{
		{header: "TIME"},
		{header: "ACTION"},
		{header: "ACTOR"},
		{header: "TARGET", short: shortTarget, drop: 1, flex: true},
		{header: "WORKSPACE", drop: 2},
		{header: "DETAIL", flex: true},
	}, rows)
}

// metadataText shows an event's metadata (a JSON object) as key=value pairs,
// name first, then in key order; null values are shown as "none".
func metadataText(meta string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(meta), &m); err != nil {
		return meta
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// A key's name first, so that a DETAIL cut on a narrow terminal still
	// says which key; the rest in key order.
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "name") != (keys[j] == "name") {
			return keys[i] == "name"
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := m[k]
		if v == nil {
			v = "none"
		}
		parts[i] = fmt.Sprintf("%s=%v", k, v)
	}
	return strings.Join(parts, " ")
}

// session shows a session that was saved to the credentials file; never its token.
func (p *printer) session(s client.Session, server, cfgPath string) error {
	switch p.format {
	case formatJSON:
		return p.JSON(sessionView{ExpiresAt: s.ExpiresAt, Account: s.Account, Workspace: s.Workspace})
	case formatPlain:
		// What the session acts as, never its token (it went to the config).
		p.Fields(p.sessionFields(s))
	default:
		ws := "none"
		if s.Workspace != nil {
			ws = s.Workspace.Name
		}
		p.Notice("Logged in to %s as %s, workspace %s; session saved to %s", client.RedactedURL(server), s.Account.Email, ws, cfgPath)
	}
	return nil
}

func (p *printer) sessionFields(s client.Session) []field {
	fields := []field{{"Email", s.Account.Email}}
	if s.Workspace != nil {
		fields = append(fields, field{"Workspace", s.Workspace.Name}, field{"Workspace ID", s.Workspace.Id})
	} else {
		fields = append(fields, field{"Workspace", "none"})
	}
	return append(fields, field{"Expires", s.ExpiresAt.Format(time.RFC3339)})
}

// sessionView is a Session without its token, for showing after login.
type sessionView struct {
	ExpiresAt time.Time      `json:"expiresAt"`
	Account   client.Account `json:"account"`
	Workspace *client.Tenant `json:"workspace"`
}
