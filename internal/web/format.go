package web

import (
	"encoding/json"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

var funcs = template.FuncMap{
	"num":    num,
	"short":  short,
	"lower":  func(s btk.KeyStatus) string { return strings.ToLower(string(s)) },
	"plan":   planName,
	"num64":  func(n int64) string { return num(int(n)) },
	"add":    func(a, b int) int { return a + b },
	"sub":    func(a, b int) int { return a - b },
	"lower2": func(r btk.Role) string { return strings.ToLower(string(r)) },
	"pct":    func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
}

// planName is a plan as people write it: CLOUD_PRO is "Cloud Pro".
func planName(p btk.Plan) string {
	if p == btk.PlanSelfHosted {
		return "Self-hosted"
	}
	words := strings.Split(strings.ToLower(string(p)), "_")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// num writes n with thousands separators: 100,000.
func num(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + num(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// short is the first block of a UUID, enough to tell rows apart.
func short(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// dateLayout is how the pages write a day.
const dateLayout = "Jan 2, 2006"

// timeValue is a time as the pages show it: exact (UTC) and relative.
type timeValue struct {
	ISO, Exact, Date, Ago string
}

func newTime(t, now time.Time) timeValue {
	t = t.UTC()
	return timeValue{
		ISO:   t.Format(time.RFC3339),
		Exact: t.Format("Jan 2, 2006, 15:04:05 UTC"),
		Date:  t.Format(dateLayout),
		Ago:   ago(t, now),
	}
}

func optTime(t *time.Time, now time.Time) *timeValue {
	if t == nil {
		return nil
	}
	v := newTime(*t, now)
	return &v
}

// ago says how long before now t was (or how long after, for expiries).
func ago(t, now time.Time) string {
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, ""
	}
	var s string
	switch {
	case d < time.Minute:
		if suffix == "" {
			return "in less than a minute"
		}
		return "just now"
	case d < time.Hour:
		s = plural(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		s = plural(int(d/time.Hour), "hour")
	case d < 60*24*time.Hour:
		s = plural(int(d/(24*time.Hour)), "day")
	default:
		return t.Format(dateLayout)
	}
	if suffix == "" {
		return "in " + s
	}
	return s + suffix
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// auditRow is one audit_events row as the Audit Log shows it.
type auditRow struct {
	Time         timeValue
	Actor        string
	Impersonated bool
	Action       string // in words
	Code         string // as stored: api_key.created
	Target       string
	TargetID     string
	Detail       string
	// KeyRef is the key as the keys page shows it (btk_1a2b3c4d_…wxyz).
	KeyRef string
	// From is the client address the event recorded, if any.
	From string
}

var actionWords = map[string]string{
	"api_key.created":               "Created key",
	"api_key.rotated":               "Rotated key",
	"api_key.revoked":               "Revoked key",
	"api_key.revoked_all":           "Revoked all keys",
	btk.EventSessionLogin:           "Logged in",
	btk.EventSessionElevated:        "Confirmed password",
	btk.EventSessionImpersonated:    "Opened as platform admin",
	btk.EventMembershipChanged:      "Changed membership",
	btk.EventWorkspaceCreated:       "Created workspace",
	btk.EventWorkspacePlanChanged:   "Changed plan",
	btk.EventWorkspaceLimitsChanged: "Changed default limits",
	btk.EventAccountCreated:         "Created account",
}

func newAuditRow(ev *btk.AuditEvent, now time.Time) auditRow {
	row := auditRow{
		Time: newTime(ev.CreatedAt, now), Actor: ev.ActorEmail, Impersonated: ev.ImpersonatorID != "",
		Action: actionWords[ev.Action], Code: ev.Action, TargetID: short(ev.TargetID),
	}
	if row.Action == "" {
		row.Action = ev.Action
	}
	if row.Actor == "" {
		row.Actor = short(ev.ActorID)
	}
	var meta map[string]any
	_ = json.Unmarshal([]byte(ev.Metadata), &meta) // shown as far as it is understood
	str := func(k string) string { v, _ := meta[k].(string); return v }
	name := str("name")
	switch {
	case ev.TargetType == "workspace":
		row.Target, row.TargetID = "Workspace", ""
	case ev.TargetType == "session":
		row.Target = "Session"
	case str("email") != "" && ev.TargetType == "account":
		row.Target = str("email")
	case name != "":
		row.Target = name
	default:
		row.Target = ev.TargetType
	}
	switch ev.Action {
	case btk.EventMembershipChanged:
		switch role, prev := str("role"), str("previousRole"); {
		case prev == "" && role != "":
			row.Detail = "added as " + role
		case role == "":
			row.Detail = "removed (was " + prev + ")"
		default:
			row.Detail = prev + " → " + role
		}
	case btk.EventWorkspaceCreated:
		row.Detail = "“" + str("name") + "” on " + planName(btk.Plan(str("plan")))
	case btk.EventWorkspacePlanChanged:
		row.Detail = planName(btk.Plan(str("previousPlan"))) + " → " + planName(btk.Plan(str("plan")))
	case btk.EventWorkspaceLimitsChanged:
		row.Detail = limitText(meta["previousPerMinute"], meta["previousPerDay"]) + " → " + limitText(meta["perMinute"], meta["perDay"])
	case btk.EventSessionImpersonated:
		if w := str("workspaceName"); w != "" {
			row.Detail = "in " + w
		}
	}
	if n, ok := meta["revokedCount"].(float64); ok {
		row.Detail = plural(int(n), "key") + " revoked"
	}
	if id, ok := meta["newApiKeyId"].(string); ok {
		row.Detail = "replaced by " + short(id)
		if nn := str("newName"); nn != "" && nn != name {
			row.Detail += " (“" + nn + "”)"
		}
	}
	if p := str("displayPrefix"); p != "" {
		if h := str("hint"); h != "" {
			row.KeyRef = p + "_…" + h
		}
	}
	if ip := str("ip"); ip != "" {
		row.From = ip
	}
	return row
}

// limitText is a pair of default limits as an event records them (null:
// the server default).
func limitText(perMinute, perDay any) string {
	part := func(v any, unit string) string {
		if n, ok := v.(float64); ok {
			return num(int(n)) + "/" + unit
		}
		return "default/" + unit
	}
	return part(perMinute, "min") + " · " + part(perDay, "day")
}
