package btk

import "time"

// Plan is a workspace's billing plan.
type Plan string

const (
	PlanCloudStarter    Plan = "CLOUD_STARTER"
	PlanCloudPro        Plan = "CLOUD_PRO"
	PlanCloudEnterprise Plan = "CLOUD_ENTERPRISE"
	PlanSelfHosted      Plan = "SELF_HOSTED"
)

// Valid reports whether p is one of the known plans.
func (p Plan) Valid() bool {
	switch p {
	case PlanCloudStarter, PlanCloudPro, PlanCloudEnterprise, PlanSelfHosted:
		return true
	}
	return false
}

// AllowsIssuing reports whether keys may be created or rotated on the plan.
// Revocation and authentication never depend on the plan.
func (p Plan) AllowsIssuing() bool { return p.Valid() && p != PlanCloudStarter }

// Role is an account's role in one workspace.
type Role string

const (
	RoleOwner  Role = "OWNER"
	RoleAdmin  Role = "ADMIN"
	RoleMember Role = "MEMBER"
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool { return r == RoleOwner || r == RoleAdmin || r == RoleMember }

// Workspace is a tenant. RateLimitPerMinute/PerDay are the workspace's own
// defaults for its keys; nil means the server default applies.
type Workspace struct {
	ID                 string
	Name               string
	Plan               Plan
	PublicClientKey    string
	RateLimitPerMinute *int
	RateLimitPerDay    *int
	CreatedAt          time.Time
	// KeyPolicy is the workspace's key policy (docs/access.md); zero = off.
	KeyPolicy KeyPolicy
}

// KeyPolicy bounds a workspace's keys: MaxLifetimeDays (create, rotate and
// use) and RevokeUnusedAfterDays (the sweep). nil = off.
type KeyPolicy struct {
	MaxLifetimeDays       *int
	RevokeUnusedAfterDays *int
}

// Prefix is the first 8 characters of the workspace UUID.
func (w *Workspace) Prefix() string { return w.ID[:WorkspacePrefixLen] }

// Account is a person or operator who logs in.
type Account struct {
	ID            string
	Email         string
	PasswordHash  string
	PlatformAdmin bool
	CreatedAt     time.Time
	// DisabledAt is set while a platform admin has disabled the account: it
	// cannot log in and its sessions are refused.
	DisabledAt *time.Time
}

// Membership gives an account a role in a workspace.
type Membership struct {
	WorkspaceID string
	AccountID   string
	Role        Role
}

// Session is a server-side login record; the JWT names it so logout can end it.
type Session struct {
	ID          string
	AccountID   string
	WorkspaceID string // "" when the session has no workspace
	// Impersonating is set on a session a platform admin opened with impersonate.
	Impersonating bool
	CreatedAt     time.Time
	ExpiresAt     time.Time
	RevokedAt     *time.Time
}

// KeyStatus is the lifecycle state of an API key.
type KeyStatus string

const (
	KeyActive  KeyStatus = "ACTIVE"
	KeyRevoked KeyStatus = "REVOKED"
	KeyExpired KeyStatus = "EXPIRED"
)

// APIKey is a workspace API key record. The plaintext is never part of it:
// only its SHA-256 Hash is kept.
type APIKey struct {
	ID                 string
	WorkspaceID        string
	Name               string
	Hash               []byte
	DisplayPrefix      string
	Hint               string
	RateLimitPerMinute *int
	RateLimitPerDay    *int
	ExpiresAt          *time.Time
	Scopes             []string
	// AllowedCIDRs are the networks the key may be used from (empty = any),
	// in their canonical form (docs/access.md).
	AllowedCIDRs  []string
	CreatedAt     time.Time
	CreatedBy     string
	LastUsedAt    *time.Time
	RevokedAt     *time.Time
	RevokedBy     string
	RotatedFromID string
	ReplacedByID  string
	// DayState is the rate limiter's persisted per-day state, written by
	// Store.RecordUsage so day counts survive a restart.
	DayState int64
	// Canary marks a trap key: never accepted, every use recorded
	// (docs/leaks.md).
	Canary bool

	// PolicyExpiresAt is when the workspace's maximum key lifetime ends the
	// key (CreatedAt + maxLifetimeDays), set on the keys the service hands
	// out; nil when the workspace has no maximum. Such a key is refused at
	// use as expired (docs/access.md), so its status says EXPIRED too.
	PolicyExpiresAt *time.Time

	// restrictions is what the key check needs of AllowedCIDRs and Scopes,
	// parsed once when the record is read for authentication.
	restrictions *restrictions
}

// Status derives the key's state at now: an active key past its expiry,
// or past its workspace's maximum lifetime, is EXPIRED.
func (k *APIKey) Status(now time.Time) KeyStatus {
	if k.RevokedAt != nil {
		return KeyRevoked
	}
	if end := k.EffectiveExpiresAt(); end != nil && !now.Before(*end) {
		return KeyExpired
	}
	return KeyActive
}

// EffectiveExpiresAt is when the key stops authenticating: the earlier of
// its own ExpiresAt and its workspace's maximum lifetime (PolicyExpiresAt);
// nil for never (docs/access.md#workspace-key-policy).
func (k *APIKey) EffectiveExpiresAt() *time.Time {
	if k.PolicyExpiresAt != nil && (k.ExpiresAt == nil || k.PolicyExpiresAt.Before(*k.ExpiresAt)) {
		return k.PolicyExpiresAt
	}
	return k.ExpiresAt
}

// ExpiresByPolicy reports that the workspace's maximum lifetime, not the
// key's own expiry, decides EffectiveExpiresAt.
func (k *APIKey) ExpiresByPolicy() bool {
	return k.PolicyExpiresAt != nil && k.EffectiveExpiresAt() == k.PolicyExpiresAt
}

// AuditAction is what happened to a key, in the key audit log.
type AuditAction string

const (
	AuditCreated    AuditAction = "CREATED"
	AuditRotated    AuditAction = "ROTATED"
	AuditRevoked    AuditAction = "REVOKED"
	AuditRevokedAll AuditAction = "REVOKED_ALL"
	AuditUpdated    AuditAction = "UPDATED"
)

// eventActions is every key audit action, with its audit_events name.
var eventActions = map[AuditAction]string{
	AuditCreated:    "api_key.created",
	AuditRotated:    "api_key.rotated",
	AuditRevoked:    "api_key.revoked",
	AuditRevokedAll: "api_key.revoked_all",
	AuditUpdated:    "api_key.updated",
}

// Valid reports whether a is a known action.
func (a AuditAction) Valid() bool {
	_, ok := eventActions[a]
	return ok
}

// EventAction is the audit_events name of a key audit action (that of
// REVOKED_ALL for an unknown one).
func (a AuditAction) EventAction() string {
	if name, ok := eventActions[a]; ok {
		return name
	}
	return eventActions[AuditRevokedAll]
}

// AuditEntry is one row of the key-specific audit table.
type AuditEntry struct {
	ID             string
	WorkspaceID    string
	Action         AuditAction
	APIKeyID       string // "" for REVOKED_ALL
	APIKeyName     string
	NewAPIKeyID    string // ROTATED only
	RevokedCount   *int   // REVOKED_ALL only
	ActorID        string
	ActorEmail     string
	ImpersonatorID string
	// ImpersonatorEmail is not stored: the service fills it in when reading.
	ImpersonatorEmail string
	IP                string
	UserAgent         string
	CreatedAt         time.Time
}

// AuditEvent is one row of audit_events, shown on the workspace Audit Log page.
type AuditEvent struct {
	ID             string
	WorkspaceID    string
	Action         string
	ActorID        string
	ActorEmail     string
	ImpersonatorID string
	// ImpersonatorEmail is not stored: the service fills it in when reading.
	ImpersonatorEmail string
	TargetType        string
	TargetID          string
	Metadata          string // a JSON object
	CreatedAt         time.Time
}

// Page asks for at most First items after the opaque cursor After.
type Page struct {
	First int
	After string
}

// Paging limits of every connection.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// KeyFilter selects keys of one workspace.
type KeyFilter struct {
	WorkspaceID    string
	IncludeRevoked bool
	Page
}

// AuditFilter selects key audit entries or audit events of one workspace.
type AuditFilter struct {
	WorkspaceID string
	APIKeyID    string      // key audit only
	Action      AuditAction // key audit only
	Since       *time.Time  // inclusive
	Until       *time.Time  // exclusive
	// APIKeyIDs (key audit only), when set, replaces APIKeyID: the entries
	// about any of these keys (a key's rotation chain).
	APIKeyIDs []string
	// ActorEmail matches the actor's email case-insensitively.
	ActorEmail string
	// EventAction selects one audit_events action (events only).
	EventAction string
	// NoWorkspace selects the events that belong to no workspace (events
	// only; WorkspaceID is then ignored).
	NoWorkspace bool
	Page
}

// KeyUsage is what the hot path learnt about a key since the last flush.
type KeyUsage struct {
	KeyID      string
	LastUsedAt time.Time
	// DayState is the rate limiter's persisted per-day state (opaque to the store).
	DayState int64
}

// UsageCount is what one key (or, summed, a workspace) did in one period:
// requests accepted, refused for the rate limit, and refused because the key
// was revoked, expired, restricted or a canary (docs/usage.md).
type UsageCount struct {
	KeyID       string
	WorkspaceID string
	// Start is the start of the period (an hour when stored), UTC.
	Start                          time.Time
	Accepted, RateLimited, Refused int64
}

// Total is the number of uses the count holds.
func (c UsageCount) Total() int64 { return c.Accepted + c.RateLimited + c.Refused }

// UsageFlush is the hourly counts one flush adds, under the flush's ID. A
// store adds them only when the ID is new to it, so a flush written again
// after a commit whose answer was lost adds nothing twice (docs/usage.md).
// An empty ID adds them whatever was written before.
type UsageFlush struct {
	ID     string
	At     time.Time // when the flush was made: its ID is kept for UsageFlushRetention
	Counts []UsageCount
}

// KeyClient is who last presented a key and was accepted: the client address
// and user agent (each at most MaxClientString bytes) and when.
type KeyClient struct {
	KeyID     string
	At        time.Time
	IP        string
	UserAgent string
}

// UsageFilter selects the hourly usage rows of a workspace (and, with KeyID,
// of one key) with Since <= hour < Until.
type UsageFilter struct {
	WorkspaceID string
	KeyID       string
	Since       time.Time
	Until       time.Time
}
