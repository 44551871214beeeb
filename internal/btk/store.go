package btk

import (
	"context"
	"errors"
	"time"
)

// Store keeps the service's state. Every method of Tx runs inside the
// transaction that Read or Write opened, so a service operation (a change and
// its two audit rows) commits or fails as one.
type Store interface {
	// Read runs fn in a read-only transaction.
	Read(ctx context.Context, fn func(Tx) error) error
	// Write runs fn in a write transaction (one writer at a time) and commits
	// when fn returns nil; any error rolls everything back.
	Write(ctx context.Context, fn func(Tx) error) error
	// RecordUsage stores last_used_at and the per-day rate limiter state of
	// keys in one batch (the hot path never writes per request).
	// The same batch adds the per-hour usage counts of each flush whose ID
	// it has not stored before (each row's counts to what is stored:
	// instances add what they counted, docs/usage.md), records those IDs,
	// and stores the latest client of each key (only a later one replaces
	// it). Rows are written in a fixed order (key, hour) so that instances
	// flushing at once do not deadlock. An error that wraps
	// ErrCommitUnknown means the transaction may have committed.
	RecordUsage(ctx context.Context, usage []KeyUsage, flushes []UsageFlush, clients []KeyClient) error
	// PruneUsage deletes the usage rows of the hours that start before
	// before, and returns how many it deleted.
	PruneUsage(ctx context.Context, before time.Time) (int64, error)
	// PruneUsageFlushes forgets the flush IDs recorded before before, and
	// returns how many it forgot.
	PruneUsageFlushes(ctx context.Context, before time.Time) (int64, error)
	// PruneDeliveries deletes the finished webhook deliveries (DELIVERED or
	// FAILED) created before before, and returns how many it deleted;
	// pending ones stay whatever their age.
	PruneDeliveries(ctx context.Context, before time.Time) (int64, error)
	// PruneSessions deletes the sessions that expired before before, and
	// returns how many it deleted.
	PruneSessions(ctx context.Context, before time.Time) (int64, error)
	// Ping reports whether the database answers.
	Ping(ctx context.Context) error
	Close() error
}

// ErrCommitUnknown is wrapped by a store's error when the connection failed
// after COMMIT was sent and before its answer came back: the transaction
// may have committed or not.
var ErrCommitUnknown = errors.New("the database's answer to the commit was lost: it may have committed")

// InstanceHold is a Store whose exclusive hold on its database can end while
// the process runs: PostgreSQL ends the session that held a lone instance's
// lock when it restarts, and another lone instance may then start, change
// keys and stop, unknown to this one's cache. InstanceHold reports whether
// the hold is in place and how many times it was taken: while it is lost
// the service refuses key checks (UNAVAILABLE), and once it is taken again
// it forgets what it cached (docs/clusters.md#postgresql).
type InstanceHold interface {
	InstanceHold() (taken uint64, held bool)
}

// read runs fn in a read transaction of st and returns what it read.
func read[T any](ctx context.Context, st Store, fn func(Tx) (T, error)) (T, error) {
	var v T
	err := st.Read(ctx, func(tx Tx) (err error) {
		v, err = fn(tx)
		return err
	})
	return v, err
}

// Tx is the data access of one transaction. Lookups return ErrNotFound when
// there is no such row. Writes made through a Tx opened by Read fail.
type Tx interface {
	// Empty reports whether the database holds no account yet (bootstrap).
	Empty(ctx context.Context) (bool, error)
	// Setting returns a server setting, or ErrNotFound.
	Setting(ctx context.Context, name string) (string, error)
	SetSetting(ctx context.Context, name, value string) error

	Workspace(ctx context.Context, id string) (*Workspace, error)
	WorkspaceByPublicKey(ctx context.Context, publicKey string) (*Workspace, error)
	// Workspaces returns every workspace, oldest first.
	Workspaces(ctx context.Context) ([]*Workspace, error)
	// CreateWorkspace returns ErrPrefixTaken when another workspace has the
	// same 8-character prefix.
	CreateWorkspace(ctx context.Context, w *Workspace) error
	// UpdateWorkspace stores the workspace's name, plan, default limits and
	// key policy.
	UpdateWorkspace(ctx context.Context, w *Workspace) error

	Account(ctx context.Context, id string) (*Account, error)
	// AccountByEmail matches the email case-insensitively.
	AccountByEmail(ctx context.Context, email string) (*Account, error)
	// CreateAccount returns ErrEmailTaken for a duplicate email.
	CreateAccount(ctx context.Context, a *Account) error

	// Role returns the account's role in the workspace, or ErrNotFound.
	Role(ctx context.Context, workspaceID, accountID string) (Role, error)
	// Memberships returns the account's memberships with their workspaces'
	// names, oldest first, in one query (me and login read them).
	Memberships(ctx context.Context, accountID string) ([]MembershipInfo, error)
	// SetMembership creates or replaces a membership.
	SetMembership(ctx context.Context, m Membership) error
	// DeleteMembership removes a membership; removing none is not an error.
	DeleteMembership(ctx context.Context, workspaceID, accountID string) error

	Session(ctx context.Context, id string) (*Session, error)
	CreateSession(ctx context.Context, s *Session) error
	RevokeSession(ctx context.Context, id string, at time.Time) error
	// EndSession ends a live session as RevokeSession does, and fails with
	// ErrNotFound when it has ended already: of two transactions ending one
	// session, one succeeds (a workspace switch replaces a session once).
	EndSession(ctx context.Context, id string, at time.Time) error
	// RevokeMemberSessions ends the account's sessions in the workspace,
	// except impersonation sessions (which do not rest on a membership).
	RevokeMemberSessions(ctx context.Context, workspaceID, accountID string, at time.Time) error

	APIKey(ctx context.Context, id string) (*APIKey, error)
	// RotationChain walks the rotation chain of key keyID of the workspace
	// in one statement: the ids of up to n keys it replaced (rotatedFromId),
	// nearest first, and of up to n keys that replaced it (replacedById),
	// nearest first; a link to no key of the workspace ends a side. A
	// chain corrupted into a loop repeats its ids up to n. ErrNotFound when
	// keyID is no key of the workspace.
	RotationChain(ctx context.Context, workspaceID, keyID string, n int) (older, newer []string, err error)
	// APIKeyByHash finds a key by the SHA-256 of its plaintext, in any state.
	APIKeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// APIKeys pages through a workspace's keys, newest first, and returns the
	// cursor of the last key when more follow ("" otherwise).
	APIKeys(ctx context.Context, f KeyFilter) (keys []*APIKey, next string, err error)
	// CreateAPIKey returns ErrNameTaken when a non-revoked key of the
	// workspace already has the name.
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// RevokeAPIKey marks a non-revoked key revoked; replacedBy is "" unless
	// the key is revoked by rotation. It returns ErrNotFound when the key does
	// not exist or is already revoked.
	RevokeAPIKey(ctx context.Context, id string, at time.Time, by, replacedBy string) error
	// UpdateAPIKey stores a non-revoked key's name, limits, scopes and
	// networks; ErrNotFound when it is revoked or missing, ErrNameTaken when
	// another active key of the workspace has the name.
	UpdateAPIKey(ctx context.Context, k *APIKey) error
	// RevokeUnusedAPIKeys revokes (revoked_by empty) at most limit
	// non-revoked keys of the workspace whose last use (else creation) is
	// before `before`, in one conditional statement, and returns the keys it
	// revoked: a key revoked by a concurrent sweep is not returned twice.
	// Canary keys are never revoked: unused is what they are for.
	RevokeUnusedAPIKeys(ctx context.Context, workspaceID string, before, at time.Time, limit int) ([]*APIKey, error)
	// CountActiveAPIKeys counts the workspace's keys that are not revoked
	// (expired ones included).
	CountActiveAPIKeys(ctx context.Context, workspaceID string) (int, error)
	// RevokeAllAPIKeys revokes every non-revoked key of the workspace and
	// returns how many it revoked.
	RevokeAllAPIKeys(ctx context.Context, workspaceID string, at time.Time, by string) (int, error)

	// ClaimCanaryMark reports whether the use of canary key keyID at at is
	// to be recorded: true, and at stored, unless a use recorded after
	// notBefore is stored already (docs/leaks.md). Instances share it.
	ClaimCanaryMark(ctx context.Context, keyID string, at, notBefore time.Time) (bool, error)
	// UsageSeries returns the hourly usage of f's workspace (or key), summed
	// over its keys, oldest first; hours with no row are left out.
	UsageSeries(ctx context.Context, f UsageFilter) ([]UsageCount, error)
	// TopKeys returns the n keys of f's workspace with the most uses in the
	// range (ties by key id), each with its totals (Start is zero).
	TopKeys(ctx context.Context, f UsageFilter, n int) ([]UsageCount, error)
	// KeyClient returns who last used the key, or ErrNotFound.
	KeyClient(ctx context.Context, keyID string) (*KeyClient, error)
	// KeyClients returns who last used each of keyIDs that is a key of the
	// workspace, in one statement (a page of keys asks for hundreds at
	// once); keys never used, and ids of no key of the workspace, are left
	// out. At most MaxPageSize ids.
	KeyClients(ctx context.Context, workspaceID string, keyIDs []string) ([]KeyClient, error)
	// KeyUsageSeries returns the usage of each of keyIDs that is a key of
	// f's workspace (f.KeyID is ignored), summed per period of [f.Since,
	// f.Until) (f.Since a period start), in one statement: each count's
	// KeyID and Start (its period's) set, ordered by key id then period;
	// periods with no row are left out. At most MaxPageSize ids.
	KeyUsageSeries(ctx context.Context, f UsageFilter, keyIDs []string, period time.Duration) ([]UsageCount, error)

	// AddAudit writes the two audit rows of one change.
	AddAudit(ctx context.Context, e *AuditEntry, ev *AuditEvent) error
	// AuditEntries pages through the key audit table, newest first.
	AuditEntries(ctx context.Context, f AuditFilter) (entries []*AuditEntry, next string, err error)
	// AuditEvents pages through audit_events, newest first.
	AuditEvents(ctx context.Context, f AuditFilter) (events []*AuditEvent, next string, err error)

	// AddAuditEvent writes one audit_events row (docs/design.md#audit: sessions,
	// memberships, plans, limits, accounts), in the change's transaction.
	AddAuditEvent(ctx context.Context, ev *AuditEvent) error
	// Accounts returns every account, oldest first.
	Accounts(ctx context.Context) ([]*Account, error)
	// WorkspaceMembers returns the workspace's memberships with their
	// accounts' emails, oldest first, in one query.
	WorkspaceMembers(ctx context.Context, workspaceID string) ([]Member, error)
	// SetAccountPassword replaces the account's password hash.
	SetAccountPassword(ctx context.Context, accountID, hash string) error
	// SetAccountDisabled disables the account at *at, or enables it when
	// at is nil.
	SetAccountDisabled(ctx context.Context, accountID string, at *time.Time) error
	// The audit chain and the event stream (docs/webhooks.md). AddAudit and
	// AddAuditEvent also link the event into its chain (under a lock on the
	// chain's head) and queue it for the workspace's webhooks (the outbox),
	// in the same transaction.

	// AuditChainHead returns the latest link of a chain (a workspace id, or
	// ChainServerWide).
	AuditChainHead(ctx context.Context, chain string) (AuditHead, error)
	// AuditChainRows returns up to limit rows of a chain with Order > after,
	// in Order.
	AuditChainRows(ctx context.Context, chain string, after int64, limit int) ([]*ChainRow, error)

	CreateWebhook(ctx context.Context, w *Webhook) error
	Webhook(ctx context.Context, id string) (*Webhook, error)
	// Webhooks returns the workspace's webhooks, oldest first.
	Webhooks(ctx context.Context, workspaceID string) ([]*Webhook, error)
	// DeleteWebhook removes the webhook and its deliveries.
	DeleteWebhook(ctx context.Context, id string) error
	// WebhookDeliveries pages through a webhook's deliveries, newest first.
	WebhookDeliveries(ctx context.Context, f DeliveryFilter) ([]*WebhookDelivery, string, error)
	// ClaimWebhookDeliveries leases up to limit pending deliveries due at now
	// whose lease (if any) has run out, to claim until now+lease, skipping
	// rows other instances are claiming (FOR UPDATE SKIP LOCKED). claim is a
	// token unique to this call. Within caps: a webhook or a workspace (or
	// its failing webhooks together) that already has that many deliveries
	// leased (in flight) gets no more. In turns (docs/webhooks.md#delivery):
	// each webhook's oldest due delivery before any webhook's next one, the
	// webhook whose latest attempt ended longest ago first, and across
	// workspaces likewise the one with the fewest in flight first.
	ClaimWebhookDeliveries(ctx context.Context, now time.Time, lease time.Duration, claim string, limit int, caps DeliveryCaps) ([]*WebhookDelivery, error)
	// FinishWebhookDelivery stores an attempt's outcome (status, attempts,
	// next attempt, last status and error, delivered at) and clears the
	// lease, if the delivery is still held under claim. It reports whether
	// the delivery left PENDING (DELIVERED or FAILED): its place in its
	// webhook's backlog is free (WebhookOutcome.Finished).
	FinishWebhookDelivery(ctx context.Context, d *WebhookDelivery, claim string) (bool, error)
	// RecordWebhookOutcome records what a batch of deliveries did to one
	// webhook (RecordDeliveries): its latest attempt, unless a later one is
	// recorded already (another instance's); the deliveries that left its
	// backlog; and, if events were skipped and there is room now, their
	// notice (WebhookOutcome.Apply). It changes the webhook's row once, with
	// the row locked while the outcome is decided: on PostgreSQL a second
	// update of a row in one transaction checks its foreign key, locking
	// the workspace's row after the webhook's, against the order of every
	// writer of an event. A deleted webhook is no error.
	RecordWebhookOutcome(ctx context.Context, o WebhookOutcome) error
	// OutboxStats counts pending deliveries and finds the oldest, and
	// counts full backlogs and skipped events, reading no more than the
	// webhooks and one end of an index (not the backlog).
	OutboxStats(ctx context.Context, now time.Time) (OutboxStats, error)
	// ExpiringKeys returns up to limit non-revoked keys expiring after now
	// and by within7 that have had no expiry notice, or only the 7-day one
	// and expire by within1.
	ExpiringKeys(ctx context.Context, now, within7, within1 time.Time, limit int) ([]*APIKey, error)
	// MarkExpiryNotice records that the key's notice for days was sent,
	// unless it (or a later one) was already: it reports whether it marked.
	MarkExpiryNotice(ctx context.Context, keyID string, days int) (bool, error)

	// RevokeAccountSessions ends every session of the account, impersonation
	// included, except the session exceptID ("" for none).
	RevokeAccountSessions(ctx context.Context, accountID, exceptID string, at time.Time) error
}

// ErrPrefixTaken is returned by CreateWorkspace when the 8-character prefix
// of the new workspace's UUID is already in use; the caller draws another.
var ErrPrefixTaken = &Error{Code: CodeInternal, Message: "workspace prefix already in use"}

// ErrBadCursor is returned for a cursor the store did not hand out.
var ErrBadCursor = &Error{Code: CodeBadUserInput, Message: "invalid cursor"}
