package web

import (
	"net/http"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// keyDetailPage is /keys/{id}: a key's settings, restrictions, history and
// usage (docs/usage.md).
type keyDetailPage struct {
	layout
	Key                     keyRow
	CanManage               bool
	CanIssue                bool
	Scopes                  []string
	Networks                []string
	Canary                  bool
	RotatedFrom, ReplacedBy string
	// LastIP and LastUA are the client of the latest accepted request.
	LastIP, LastUA string
	// History is the rotation chain's key audit entries (owner tier only;
	// HistoryHidden says why it is not shown).
	History       []historyRow
	HistoryHidden bool
	// OlderCut and NewerCut, when set, are the farthest key of the rotation
	// chain the history covers on a side where the chain goes on
	// (btk.MaxChainKeys): its page's history reads on.
	OlderCut, NewerCut string
	ChainBound         string
	ByHour             bool
	Chart              chart
}

type historyRow struct {
	Time                timeValue
	Action, Name, Actor string
	From, Detail        string
}

var historyWords = map[btk.AuditAction]string{
	btk.AuditCreated:    "Created",
	btk.AuditRotated:    "Rotated",
	btk.AuditRevoked:    "Revoked",
	btk.AuditRevokedAll: "Revoked with all keys",
}

func (h *Handler) keyDetail(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	l, ok := h.frame(w, r, a, "API key", "keys")
	if !ok {
		return
	}
	ctx := r.Context()
	k, err := h.svc.Key(ctx, a, r.PathValue("id"))
	if err == nil && k == nil {
		err = btk.ErrNotFound
	}
	if err != nil {
		h.fail(w, r, l, err)
		return
	}
	now := h.svc.Now()
	lim := h.svc.EffectiveLimits(k, l.Workspace)
	p := keyDetailPage{
		layout: *l, CanManage: a.OwnerTier(), CanIssue: l.Workspace.Plan.AllowsIssuing(),
		Key: keyRow{
			ID: k.ID, Name: k.Name, Prefix: k.DisplayPrefix, Hint: k.Hint, Status: k.Status(now),
			PerMinute: lim.PerMinute, PerDay: lim.PerDay, OwnLimits: k.RateLimitPerMinute != nil || k.RateLimitPerDay != nil,
			Expires: optTime(k.EffectiveExpiresAt(), now), ByPolicy: k.ExpiresByPolicy(), LastUsed: optTime(k.LastUsedAt, now), Created: newTime(k.CreatedAt, now),
		},
		Scopes: k.Scopes, Networks: k.AllowedCIDRs, Canary: k.Canary, RotatedFrom: k.RotatedFromID, ReplacedBy: k.ReplacedByID,
		ByHour: r.URL.Query().Get("by") == "hour",
	}
	p.layout.Title = k.Name
	if c, err := h.svc.LastClient(ctx, a, k.ID); err == nil && c != nil {
		p.LastIP, p.LastUA = c.IP, c.UserAgent
	}
	rng := btk.UsageRange{Until: &now, Granularity: btk.GranularityDay}
	since := now.Add(-29 * 24 * time.Hour) // 30 days
	if p.ByHour {
		since = now.Add(-47 * time.Hour) // 48 hours
		rng.Granularity = btk.GranularityHour
	}
	rng.Since = &since
	pts, err := h.svc.KeyUsage(ctx, a, k.ID, rng)
	if err != nil {
		h.fail(w, r, l, err)
		return
	}
	p.Chart = newChart(pts, rng.Granularity)
	p.Chart.Label = "Uses of " + k.Name + " per day, last 30 days"
	if p.ByHour {
		p.Chart.Label = "Uses of " + k.Name + " per hour, last 48 hours"
	}
	log, err := h.svc.KeyAuditLog(ctx, a, btk.AuditFilter{APIKeyID: k.ID, Page: btk.Page{First: 50}})
	if p.HistoryHidden, ok = h.readOutcome(w, r, l, err); !ok {
		return
	}
	var entries []*btk.AuditEntry
	if log != nil {
		entries = log.Entries
		if c := log.Chain; c != nil {
			p.ChainBound = num(btk.MaxChainKeys)
			if c.OlderCut {
				p.OlderCut = c.OldestID
			}
			if c.NewerCut {
				p.NewerCut = c.NewestID
			}
		}
	}
	for _, e := range entries {
		row := historyRow{Time: newTime(e.CreatedAt, now), Action: historyWords[e.Action], Name: e.APIKeyName, Actor: e.ActorEmail, From: e.IP}
		if e.ImpersonatorID != "" {
			row.Actor += " (as platform admin)"
		}
		if e.NewAPIKeyID != "" {
			row.Detail = "replaced by " + short(e.NewAPIKeyID)
		}
		p.History = append(p.History, row)
	}
	h.render(w, r, "key", http.StatusOK, p)
}

// switchWorkspace replaces the session with one in another of the
// account's workspaces (the header's switcher); the domain ends the old one.
// Choosing the workspace the session is in changes nothing.
func (h *Handler) switchWorkspace(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if !h.parseForm(w, r) {
		return
	}
	ws := r.PostForm.Get("workspace")
	if ws == a.WorkspaceID {
		http.Redirect(w, r, "/keys", http.StatusSeeOther)
		return
	}
	info, err := h.svc.SwitchWorkspace(r.Context(), a, ws)
	if err != nil {
		h.fail(w, r, &layout{Actor: a}, err)
		return
	}
	h.startSession(w, r, info)
}

// replaceSession answers an impersonation: a's session, which info
// replaces, ends, and startSession.
func (h *Handler) replaceSession(w http.ResponseWriter, r *http.Request, a *btk.Actor, info *btk.SessionInfo) {
	if err := h.svc.Logout(r.Context(), a); err != nil {
		h.log.WarnContext(r.Context(), "could not end the session a new one replaced", "err", err)
	}
	h.startSession(w, r, info)
}

// startSession gives the browser the cookies of info, the session opened,
// and the keys page.
func (h *Handler) startSession(w http.ResponseWriter, r *http.Request, info *btk.SessionInfo) {
	setCookie(w, r, info.Token, info.ExpiresAt)
	setDeviceCookie(w, r, info.DeviceToken)
	http.Redirect(w, r, "/keys", http.StatusSeeOther)
}
