package web

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// layout is what every page's frame shows: who is logged in, where, and the
// active navigation entry.
type layout struct {
	Title     string
	Nav       string
	Actor     *btk.Actor
	Workspace *btk.Workspace
	// CanAudit: the role may read the audit log (owner tier); the link is
	// shown only then.
	CanAudit bool
	// Memberships are the account's workspaces, for the switcher (shown
	// with two or more).
	Memberships []btk.MembershipInfo
}

type messagePage struct {
	layout
	Heading, Text string
}

// frame reads the layout of an authenticated page. A session without a
// workspace (a platform admin who belongs to none) is sent to the picker.
func (h *Handler) frame(w http.ResponseWriter, r *http.Request, a *btk.Actor, title, nav string) (*layout, bool) {
	l := &layout{Title: title, Nav: nav, Actor: a}
	if a.WorkspaceID == "" {
		if a.PlatformAdmin {
			http.Redirect(w, r, "/workspaces", http.StatusSeeOther)
		} else {
			h.message(w, r, l, http.StatusOK, "No workspace yet", "Your account is not a member of any workspace. Ask a workspace owner to add you, then log in again.")
		}
		return nil, false
	}
	ws, err := h.svc.Workspace(r.Context(), a)
	if err != nil {
		h.fail(w, r, l, err)
		return nil, false
	}
	l.Workspace = ws
	l.CanAudit = a.OwnerTier()
	if !a.Impersonating {
		if ms, err := h.svc.Memberships(r.Context(), a); err == nil && len(ms) > 1 {
			l.Memberships = ms
		}
	}
	return l, true
}

func (h *Handler) root(w http.ResponseWriter, r *http.Request) {
	if _, err := h.actor(r); err != nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/keys", http.StatusSeeOther)
}

// ---- login and logout ----

type loginPage struct {
	layout
	Email   string
	Error   string
	Choices []btk.MembershipInfo
	Chosen  string // the chosen workspace id
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if _, err := h.actor(r); err == nil {
		http.Redirect(w, r, "/keys", http.StatusSeeOther)
		return
	}
	h.render(w, r, "login", http.StatusOK, loginPage{layout: layout{Title: "Log in"}})
}

// login calls the same domain Login as the GraphQL mutation, with the client
// address in the context: the same password throttles apply.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r) {
		return
	}
	email, workspace := strings.TrimSpace(r.PostForm.Get("email")), r.PostForm.Get("workspace")
	ctx := btk.WithClientIP(r.Context(), h.clientIP(r))
	if c, err := r.Cookie(DeviceCookieName); err == nil {
		ctx = btk.WithDeviceToken(ctx, c.Value)
	}
	// An account in several workspaces gets the first, and the header's
	// switcher offers the others (one login, no password typed twice).
	info, err := h.svc.LoginFirst(ctx, email, r.PostForm.Get("password"), workspace)
	if err != nil {
		p := loginPage{layout: layout{Title: "Log in"}, Email: email, Chosen: workspace, Error: sentence(btk.ErrorMessage(err))}
		status := statusOf(err)
		if status == http.StatusInternalServerError {
			h.log.ErrorContext(r.Context(), "dashboard login failed", "err", err)
		}
		h.render(w, r, "login", status, p)
		return
	}
	// A session this browser already had is replaced: end it rather than
	// leave it alive for its 12 hours.
	if old, err := h.actor(r); err == nil {
		if err := h.svc.Logout(r.Context(), old); err != nil {
			h.log.WarnContext(r.Context(), "could not end the session a login replaced", "err", err)
		}
	}
	setCookie(w, r, info.Token, info.ExpiresAt)
	setDeviceCookie(w, r, info.DeviceToken)
	http.Redirect(w, r, "/keys", http.StatusSeeOther)
}

// logout ends the server-side session, not just the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if a, err := h.actor(r); err == nil {
		if err := h.svc.Logout(r.Context(), a); err != nil {
			h.fail(w, r, nil, err)
			return
		}
	}
	clearCookie(w, r)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// ---- API keys ----

type keysPage struct {
	layout
	// Forbidden: the role may not see keys (MEMBER).
	Forbidden bool
	// CanManage: owner tier — create, rotate and revoke controls are shown.
	CanManage bool
	// CanIssue: the plan allows creating and rotating keys.
	CanIssue bool
	Keys     []keyRow
	ShowAll  bool
	Next     string
	First    bool // on the first page
	// NewKey is the plaintext of a key just created or rotated: shown in the
	// answer to that form only.
	NewKey *shownOnce
	Notice string
	Form   createForm
	// The workspace defaults a key without its own limits gets.
	DefaultPerMinute, DefaultPerDay int
	// Expiry is the expiry a key created now gets under the workspace's
	// maximum lifetime (docs/access.md); nil without one.
	Expiry *timeValue
}

// shownOnce is a secret shown in the answer to the form that made it and
// never again (the shownOnce template of layout.html).
type shownOnce struct {
	ID      string // the element id of the secret
	Title   string
	Warning string // what happened and what to do now
	Why     string
	Note    string // optional
	Secret  string
	Done    string // where to go once it is stored
	// Alert announces the warning and moves the focus to the secret: a new
	// key is what the page is about.
	Alert bool
}

// newKey shows the plaintext of a key just created or rotated.
func newKey(res *btk.NewKeyResult, rotated bool) *shownOnce {
	s := &shownOnce{
		ID:      "new-key",
		Title:   "Your new key “" + res.Key.Name + "”",
		Warning: "Key “" + res.Key.Name + "” created. Copy it now.",
		Why:     "This is the only time it is shown; btk keeps only a hash. If you lose it, rotate the key.",
		Secret:  res.Plaintext,
		Done:    "/keys",
		Alert:   true,
	}
	if rotated {
		s.Title = "Key rotated: here is the new key for “" + res.Key.Name + "”"
		s.Warning = "Key “" + res.Key.Name + "” rotated. Copy it now."
		s.Note = "The old key stopped working the moment this one was issued."
		if t := res.Key.ExpiresAt; t != nil {
			s.Note += " The new key expires on " + t.UTC().Format(dateLayout) + "."
		}
	}
	return s
}

type createForm struct {
	Name, PerMinute, PerDay string
	Error                   string
}

type keyRow struct {
	ID, Name, Prefix, Hint string
	Status                 btk.KeyStatus
	PerMinute, PerDay      int
	OwnLimits              bool
	// Expires is when the key stops authenticating: its own expiry or, if
	// earlier (ByPolicy), the workspace's maximum lifetime.
	Expires, LastUsed *timeValue
	ByPolicy          bool
	Created           timeValue
	// Scopes and Networks are the key's restrictions (docs/access.md).
	Scopes, Networks []string
	// Spark is the key's last 7 days (nil when they could not be read).
	Spark *sparkline
}

func (h *Handler) keys(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	p, ok := h.keysPage(w, r, a)
	if !ok {
		return
	}
	if id := r.URL.Query().Get("revoked"); id != "" {
		if k, err := h.svc.Key(r.Context(), a, id); err == nil && k != nil && k.RevokedAt != nil {
			p.Notice = "“" + k.Name + "” was revoked. Requests using it are refused from now on."
		}
	}
	h.render(w, r, "keys", http.StatusOK, p)
}

// keysPage reads everything the API Keys page shows.
func (h *Handler) keysPage(w http.ResponseWriter, r *http.Request, a *btk.Actor) (*keysPage, bool) {
	l, ok := h.frame(w, r, a, "API keys", "keys")
	if !ok {
		return nil, false
	}
	q := r.URL.Query()
	p := &keysPage{
		layout: *l, CanManage: a.OwnerTier(), CanIssue: l.Workspace.Plan.AllowsIssuing(),
		ShowAll: q.Get("status") == "all", First: q.Get("after") == "",
	}
	p.DefaultPerMinute, p.DefaultPerDay = h.svc.WorkspaceLimits(l.Workspace)
	p.Expiry = optTime(btk.MaxExpiry(l.Workspace, h.svc.Now()), h.svc.Now())
	keys, next, err := h.svc.ListKeys(r.Context(), a, p.ShowAll, btk.Page{First: keysPageSize, After: q.Get("after")})
	if p.Forbidden, ok = h.readOutcome(w, r, l, err); !ok {
		return nil, false
	}
	p.Next = next
	now := h.svc.Now()
	weekAgo := now.Add(-6 * 24 * time.Hour) // this day and the six before
	for _, k := range keys {
		lim := h.svc.EffectiveLimits(k, l.Workspace)
		row := keyRow{
			ID: k.ID, Name: k.Name, Prefix: k.DisplayPrefix, Hint: k.Hint, Status: k.Status(now),
			PerMinute: lim.PerMinute, PerDay: lim.PerDay,
			OwnLimits: k.RateLimitPerMinute != nil || k.RateLimitPerDay != nil,
			Expires:   optTime(k.EffectiveExpiresAt(), now), ByPolicy: k.ExpiresByPolicy(), LastUsed: optTime(k.LastUsedAt, now), Created: newTime(k.CreatedAt, now),
			Scopes: k.Scopes, Networks: k.AllowedCIDRs,
		}
		if pts, err := h.svc.KeyUsage(r.Context(), a, k.ID, btk.UsageRange{Since: &weekAgo, Until: &now, Granularity: btk.GranularityDay}); err == nil {
			sp := newSparkline(pts)
			row.Spark = &sp
		}
		p.Keys = append(p.Keys, row)
	}
	return p, true
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if !h.parseForm(w, r) {
		return
	}
	f := createForm{Name: r.PostForm.Get("name"), PerMinute: r.PostForm.Get("per_minute"), PerDay: r.PostForm.Get("per_day")}
	in := btk.CreateKeyInput{Name: f.Name}
	// The form has no expiry field (docs/design.md#dashboard): under a maximum lifetime the
	// key gets the longest expiry allowed, as the form says.
	if ws, err := h.svc.Workspace(r.Context(), a); err == nil {
		in.ExpiresAt = btk.MaxExpiry(ws, h.svc.Now())
	}
	var err error
	if in.RateLimitPerMinute, err = optInt(f.PerMinute, "Requests per minute"); err == nil {
		in.RateLimitPerDay, err = optInt(f.PerDay, "Requests per day")
	}
	var res *btk.NewKeyResult
	if err == nil {
		res, err = h.svc.CreateKey(r.Context(), a, in)
	}
	p, status, ok := answerForm(h, w, r, a, err, &f.Error, h.keysPage)
	if !ok {
		return
	}
	if res != nil {
		p.NewKey = newKey(res, false)
	} else {
		p.Form = f
	}
	h.render(w, r, "keys", status, p)
}

// answerForm reads the page that answers a create form after the service
// answered err, and its status (200 on success). The page is read after the
// change, so that its list includes what was created. A refusal the user
// can fix is written to *formError, for the form to show again with what
// was typed; a failure, or an action the role does not allow, gets the
// error page instead, and ok is false (the answer is written).
func answerForm[P any](h *Handler, w http.ResponseWriter, r *http.Request, a *btk.Actor, err error, formError *string,
	read func(http.ResponseWriter, *http.Request, *btk.Actor) (P, bool)) (p P, status int, ok bool) {
	status = http.StatusOK
	if err != nil {
		status = statusOf(err)
		if status == http.StatusInternalServerError || btk.ErrorCode(err) == btk.CodeForbidden {
			h.fail(w, r, nil, err)
			return p, status, false
		}
		*formError = sentence(btk.ErrorMessage(err))
	}
	p, ok = read(w, r, a)
	return p, status, ok
}

type keyPage struct {
	layout
	Key      keyRow
	CanIssue bool
	Error    string
	// RotatedExpiry is the expiry a rotation from the dashboard gives the new
	// key (btk.RotationExpiry; nil for none), and ExpiryKept whether it is
	// this key's own rather than the workspace's maximum lifetime.
	RotatedExpiry *timeValue
	ExpiryKept    bool
}

// keyPage reads the key a rotate or revoke page is about; only owner tier
// gets this far (the service decides; its answer is shown).
func (h *Handler) keyPage(w http.ResponseWriter, r *http.Request, a *btk.Actor, title string) (*keyPage, bool) {
	l, ok := h.frame(w, r, a, title, "keys")
	if !ok {
		return nil, false
	}
	k, err := h.svc.Key(r.Context(), a, r.PathValue("id"))
	if err == nil && k == nil {
		err = btk.ErrNotFound
	}
	if err == nil && !a.OwnerTier() {
		err = btk.ErrForbidden
	}
	if err != nil {
		h.fail(w, r, l, err)
		return nil, false
	}
	now := h.svc.Now()
	exp := btk.RotationExpiry(l.Workspace, k, now)
	return &keyPage{
		layout:        *l,
		Key:           keyRow{ID: k.ID, Name: k.Name, Prefix: k.DisplayPrefix, Hint: k.Hint, Status: k.Status(now), Created: newTime(k.CreatedAt, now)},
		CanIssue:      l.Workspace.Plan.AllowsIssuing(),
		RotatedExpiry: optTime(exp, now),
		ExpiryKept:    exp == k.ExpiresAt,
	}, true
}

func (h *Handler) rotateForm(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if p, ok := h.keyPage(w, r, a, "Rotate key"); ok {
		h.render(w, r, "rotate", http.StatusOK, p)
	}
}

// rotateKey checks the password again (the domain's 5-minute elevation) and
// rotates with that elevation in the same request.
func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if !h.parseForm(w, r) {
		return
	}
	kp, ok := h.keyPage(w, r, a, "Rotate key")
	if !ok {
		return
	}
	token, _, err := h.svc.Elevate(r.Context(), a, r.PostForm.Get("password"))
	var res *btk.NewKeyResult
	if err == nil {
		h.svc.CheckElevation(a, token)
		// No expiry field here, as in the create form: under a maximum
		// lifetime the new key keeps the old expiry only if the policy
		// allows it, else gets the maximum, as the page says
		// (docs/access.md#workspace-key-policy).
		res, err = h.svc.RotateKey(r.Context(), a, kp.Key.ID, btk.RotateKeyInput{ExpiryWithinPolicy: true})
	}
	if err != nil {
		status := statusOf(err)
		if status == http.StatusInternalServerError {
			h.fail(w, r, nil, err)
			return
		}
		kp.Error = sentence(btk.ErrorMessage(err))
		if errors.Is(err, btk.ErrWrongPassword) {
			kp.Error = "That password is not correct."
		}
		h.render(w, r, "rotate", status, kp)
		return
	}
	p, ok := h.keysPage(w, r, a)
	if !ok {
		return
	}
	p.NewKey = newKey(res, true)
	h.render(w, r, "keys", http.StatusOK, p)
}

func (h *Handler) revokeForm(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	if p, ok := h.keyPage(w, r, a, "Revoke key"); ok {
		h.render(w, r, "revoke", http.StatusOK, p)
	}
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	k, err := h.svc.RevokeKey(r.Context(), a, r.PathValue("id"))
	if err != nil {
		l, ok := h.frame(w, r, a, "Revoke key", "keys")
		if ok {
			h.fail(w, r, l, err)
		}
		return
	}
	http.Redirect(w, r, "/keys?revoked="+k.ID, http.StatusSeeOther) // #nosec G710 -- a fixed local path; k.ID is a UUID the store made
}

// ---- audit log ----

type auditPage struct {
	layout
	Forbidden bool
	Events    []auditRow
	Next      string
	First     bool
	// The filters as given (action, actor email, from and to dates), the
	// query string that keeps them across pages, and the actions offered.
	Action, ActorEmail, From, To string
	Query                        template.URL // url.Values.Encode of the filters
	Actions                      []actionChoice
	Filtered                     bool
	Error                        string
}

type actionChoice struct{ Code, Words string }

func (h *Handler) audit(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	l, ok := h.frame(w, r, a, "Audit log", "audit")
	if !ok {
		return
	}
	q := r.URL.Query()
	after := q.Get("after")
	p := auditPage{layout: *l, First: after == "", Action: q.Get("action"), ActorEmail: strings.TrimSpace(q.Get("actor")), From: q.Get("from"), To: q.Get("to")}
	p.Actions = auditActions()
	f := btk.AuditFilter{Page: btk.Page{First: auditPageSize, After: after}, EventAction: p.Action, ActorEmail: p.ActorEmail}
	keep := url.Values{}
	for k, v := range map[string]string{"action": p.Action, "actor": p.ActorEmail, "from": p.From, "to": p.To} {
		if v != "" {
			keep.Set(k, v)
		}
	}
	p.Query, p.Filtered = template.URL(keep.Encode()), len(keep) > 0 // #nosec G203 -- url.Values.Encode escapes every key and value
	// Dates are whole UTC days: from its start, to its end.
	if t, err := time.Parse("2006-01-02", p.From); err == nil {
		f.Since = &t
	} else if p.From != "" {
		p.Error = "The “from” date must be a date such as 2026-11-01."
	}
	if t, err := time.Parse("2006-01-02", p.To); err == nil {
		t = t.Add(24 * time.Hour)
		f.Until = &t
	} else if p.To != "" {
		p.Error = "The “to” date must be a date such as 2026-11-30."
	}
	var events []*btk.AuditEvent
	var next string
	var err error
	if p.Error == "" {
		events, next, err = h.svc.AuditEvents(r.Context(), a, f)
	}
	switch {
	case btk.ErrorCode(err) == btk.CodeForbidden:
		p.Forbidden = true
	case btk.ErrorCode(err) == btk.CodeBadUserInput:
		p.Error = sentence(btk.ErrorMessage(err))
	case err != nil:
		h.fail(w, r, l, err)
		return
	}
	now := h.svc.Now()
	for _, ev := range events {
		p.Events = append(p.Events, newAuditRow(ev, now))
	}
	p.Next = next
	status := http.StatusOK
	if p.Error != "" {
		status = http.StatusBadRequest
	}
	h.render(w, r, "audit", status, p)
}

// auditActions are the actions the filter offers, in words, sorted by them.
func auditActions() []actionChoice {
	out := make([]actionChoice, 0, len(actionWords))
	for code, words := range actionWords {
		out = append(out, actionChoice{code, words})
	}
	slices.SortFunc(out, func(a, b actionChoice) int { return strings.Compare(a.Words, b.Words) })
	return out
}

// ---- workspaces (platform admin) ----

type workspacesPage struct {
	layout
	Forbidden  bool
	Workspaces []*btk.Workspace
}

func (h *Handler) workspaces(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	l := &layout{Title: "Workspaces", Nav: "workspaces", Actor: a}
	if a.WorkspaceID != "" {
		if ws, err := h.svc.Workspace(r.Context(), a); err == nil {
			l.Workspace = ws
		}
	}
	p := workspacesPage{layout: *l}
	ws, err := h.svc.Workspaces(r.Context(), a)
	var ok bool
	if p.Forbidden, ok = h.readOutcome(w, r, l, err); !ok {
		return
	}
	p.Workspaces = ws
	h.render(w, r, "workspaces", http.StatusOK, p)
}

// impersonate opens an owner-tier session of the platform admin in the
// workspace, as `btk impersonate` does, and ends the session it replaces.
func (h *Handler) impersonate(w http.ResponseWriter, r *http.Request, a *btk.Actor) {
	info, err := h.svc.Impersonate(r.Context(), a, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, &layout{Actor: a}, err)
		return
	}
	h.replaceSession(w, r, a, info)
}

// ---- helpers ----

// optInt reads an optional whole number from a form field.
func optInt(s, label string) (*int, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, ",", ""))
	if s == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, btk.Errorf(btk.CodeBadUserInput, "%s must be a whole number", label)
	}
	return &n, nil
}

// sentence turns a domain message into a sentence for a page.
func sentence(msg string) string {
	if msg == "" {
		return msg
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
