package btk

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/btk-project/btk/internal/access"
	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/google/uuid"
)

// Config holds the server-wide settings of the service.
type Config struct {
	// Default limits of a key whose key and workspace set none.
	DefaultPerMinute int
	DefaultPerDay    int
	// Now is the clock; nil means time.Now.
	Now Clock
	// KeyCacheSize bounds the in-memory key cache (entries); 0 means 100,000.
	KeyCacheSize int
	// MaxKeysPerWorkspace bounds a workspace's keys that are not revoked;
	// 0 means DefaultMaxKeysPerWorkspace.
	MaxKeysPerWorkspace int
	// ChangeBudget is each workspace's budget of changes (changebudget.go);
	// zero means DefaultChangeBudget.
	ChangeBudget ratelimit.Limits
	// Observer receives key-check figures for metrics; nil observes nothing.
	Observer Observer
	// KeyGate and Throttle hold the state instances share (rate-limit
	// windows, revocation, password throttles and the other budgets); nil
	// means in memory (one node).
	KeyGate  KeyGate
	Throttle Throttle
	// WebhookAllowPrivate lets webhooks point at loopback, private and
	// link-local receivers (--webhook-allow-private).
	WebhookAllowPrivate bool
	// Resolver resolves webhook hosts at creation; nil means net.DefaultResolver.
	Resolver Resolver
	// SessionKeys, when given, sign and verify session tokens by key id
	// (Keyring); the first signs. The single secret of before then only
	// verifies tokens without a key id, for one session lifetime after the
	// first start with keys (docs/security.md).
	SessionKeys []SigningKey
	// UsageRetention is how long hourly usage counts are kept; 0 means
	// DefaultUsageRetention.
	UsageRetention time.Duration
	// ScanWait is how long a usage or audit read waits for one of the
	// MaxScans slots; 0 means DefaultScanWait.
	ScanWait time.Duration
	// Log receives what the service does on its own, off any request (a
	// canary use it could not record); nil logs nothing.
	Log *slog.Logger
}

// Server defaults (docs/design.md#rate-limits).
const (
	DefaultPerMinute = 600
	DefaultPerDay    = 100_000
)

// Service holds the rules of the product: every operation checks the policy,
// validates its input, and commits its change together with its audit rows.
// Resolvers and commands stay thin around it.
type Service struct {
	// verifying counts the audit chain verifications running
	// (MaxChainVerifications).
	verifying atomic.Int32
	// verifyTurns lets one verification of a chain run at a time, and
	// scanTurns one usage or audit read of a workspace (scans.go).
	verifyTurns, scanTurns turns
	// scans holds the running usage and audit reads (MaxScans, scans.go).
	scans  chan struct{}
	store  Store
	tokens *Tokens
	now    Clock
	cfg    Config
	cache  *keyCache
	gate   KeyGate // rate limits and revocation; also collects last_used_at (FlushUsage)
	// clustered: other instances change the database too, so only what the
	// gate vouches for (a key and its workspace) is served from the cache.
	clustered bool
	// rechecks shares KeyStillValid's database reads between the proxied
	// connections of a key (auth.go).
	rechecks keyRechecks
	// passwords throttles and bounds password checks (login, elevate).
	passwords *passwordGate
	// usage is what FlushDueUsage has collected and not written yet.
	usage usageBook
	// canaries counts canary key uses between their records.
	canaries canaryBook
	// unknown keeps floods of unknown keys off the database.
	unknown *unknownKeys
	// counter counts each key's uses per hour until a flush writes them.
	counter *usageCounter
	// rules are the access rules (docs/access.md); nil = none.
	rules atomic.Pointer[access.Rules]
	// hold is the store's hold on its database, nil when it cannot be
	// lost (SQLite's file lock); holdTaken is the count of takings the
	// cache was filled under (checkHold).
	hold      InstanceHold
	holdTaken atomic.Uint64
}

const secretSetting = "jwt_secret"

// NewService opens the service on store. secret signs session tokens; when
// empty, a secret generated at the first start and kept in the database is used.
func NewService(ctx context.Context, store Store, secret []byte, cfg Config) (*Service, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DefaultPerMinute == 0 {
		cfg.DefaultPerMinute = DefaultPerMinute
	}
	if cfg.DefaultPerDay == 0 {
		cfg.DefaultPerDay = DefaultPerDay
	}
	if err := checkLimits(&cfg.DefaultPerMinute, &cfg.DefaultPerDay); err != nil {
		return nil, fmt.Errorf("default rate limits: %w", err)
	}
	clustered := cfg.KeyGate != nil
	if cfg.KeyGate == nil {
		cfg.KeyGate = NewLocalGate()
	}
	if cfg.KeyCacheSize == 0 {
		cfg.KeyCacheSize = 100_000
	}
	if cfg.MaxKeysPerWorkspace == 0 {
		cfg.MaxKeysPerWorkspace = DefaultMaxKeysPerWorkspace
	}
	if cfg.ChangeBudget == (ratelimit.Limits{}) {
		cfg.ChangeBudget = DefaultChangeBudget
	}
	if cfg.UsageRetention == 0 {
		cfg.UsageRetention = DefaultUsageRetention
	}
	if cfg.ScanWait == 0 {
		cfg.ScanWait = DefaultScanWait
	}
	if cfg.UsageRetention < time.Hour {
		return nil, errors.New("usage retention must be at least an hour")
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ring := Keyring{Legacy: secret}
	if len(cfg.SessionKeys) > 0 {
		// Before storedSecret makes one: only a secret that existed can
		// have signed sessions.
		var err error
		if ring, err = sessionKeyring(ctx, store, secret, cfg.SessionKeys, cfg.Now()); err != nil {
			return nil, err
		}
	}
	if len(secret) == 0 {
		var err error
		if secret, err = storedSecret(ctx, store); err != nil {
			return nil, err
		}
		if len(cfg.SessionKeys) == 0 {
			ring.Legacy = secret
		}
	}
	if len(secret) < MinSecretLen {
		return nil, errors.New("the server secret must be at least 32 bytes")
	}
	svc := &Service{
		store:     store,
		tokens:    NewKeyringTokens(ring, secret, cfg.Now),
		now:       cfg.Now,
		cfg:       cfg,
		cache:     newKeyCache(cfg.KeyCacheSize),
		gate:      cfg.KeyGate,
		clustered: clustered,
		passwords: newPasswordGate(),
		unknown:   newUnknownKeys(),
		counter:   newUsageCounter(),
		scans:     make(chan struct{}, MaxScans),
	}
	if cfg.Throttle != nil { // the instances share the password budgets
		svc.passwords.limiter = cfg.Throttle
	}
	if h, ok := store.(InstanceHold); ok {
		taken, _ := h.InstanceHold()
		svc.hold = h
		svc.holdTaken.Store(taken)
	}
	return svc, nil
}

// keyringSinceSetting is when the server first started with session keys:
// the single secret of before verifies its tokens (no kid) for one session
// lifetime after it, and never again.
const keyringSinceSetting = "session_keyring_since"

// sessionKeyring builds the ring of keys: the configured ones, and the
// secret of before (explicit, or the one in the database if there is one)
// for tokens without a kid until a session lifetime after the first start
// with keys.
func sessionKeyring(ctx context.Context, store Store, secret []byte, keys []SigningKey, now time.Time) (Keyring, error) {
	seen := map[string]bool{}
	for _, k := range keys {
		if !keyIDPattern.MatchString(k.ID) || seen[k.ID] || len(k.Secret) < MinSecretLen {
			return Keyring{}, fmt.Errorf("session key %q: want a unique id of 1-64 letters, digits, '.', '_' or '-' and a secret of at least %d bytes", k.ID, MinSecretLen)
		}
		seen[k.ID] = true
	}
	ring := Keyring{Keys: keys, Legacy: secret}
	err := store.Write(ctx, func(tx Tx) error {
		if len(ring.Legacy) == 0 {
			s, err := tx.Setting(ctx, secretSetting)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return err
			default:
				ring.Legacy = []byte(s)
			}
		}
		since, err := tx.Setting(ctx, keyringSinceSetting)
		if errors.Is(err, ErrNotFound) {
			since = now.UTC().Format(time.RFC3339Nano)
			err = tx.SetSetting(ctx, keyringSinceSetting, since)
		}
		if err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return fmt.Errorf("stored %s: %w", keyringSinceSetting, err)
		}
		ring.LegacyUntil = t.Add(SessionTTL)
		return nil
	})
	if err != nil {
		return Keyring{}, fmt.Errorf("session keys: %w", err)
	}
	if len(ring.Legacy) == 0 {
		ring.LegacyUntil = time.Time{}
	}
	return ring, nil
}

// storedSecret returns the signing secret kept in the database, making one on
// the first start.
func storedSecret(ctx context.Context, store Store) ([]byte, error) {
	var secret string
	err := store.Write(ctx, func(tx Tx) error {
		s, err := tx.Setting(ctx, secretSetting)
		if errors.Is(err, ErrNotFound) {
			b := make([]byte, 32)
			rand.Read(b)
			s = base64.RawURLEncoding.EncodeToString(b)
			err = tx.SetSetting(ctx, secretSetting, s)
		}
		secret = s
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("server secret: %w", err)
	}
	return []byte(secret), nil
}

// Now returns the service clock's time.
func (s *Service) Now() time.Time { return s.now() }

// BootstrapResult tells what Bootstrap made.
type BootstrapResult struct {
	Created   bool
	Email     string
	Password  string // set only when generated: print it once
	Workspace *Workspace
}

// Bootstrap prepares an empty database: a platform admin (email and password
// given, or admin@localhost with a generated password), a workspace "Default"
// on SELF_HOSTED, and that account as its OWNER. On a database that has an
// account already it does nothing.
func (s *Service) Bootstrap(ctx context.Context, email, password string) (BootstrapResult, error) {
	res := BootstrapResult{Email: email}
	if res.Email == "" {
		res.Email = "admin@localhost"
	}
	if password == "" {
		b := make([]byte, 18)
		rand.Read(b)
		password = base64.RawURLEncoding.EncodeToString(b)
		res.Password = password
	}
	email, err := cleanEmail(res.Email)
	if err != nil {
		return res, err
	}
	if err := checkPassword(password); err != nil {
		return res, err
	}
	var empty bool
	if err := s.store.Read(ctx, func(tx Tx) (err error) {
		empty, err = tx.Empty(ctx)
		return err
	}); err != nil || !empty {
		res.Password = ""
		return res, err
	}
	hash := HashPassword(password) // only now: argon2id is slow on purpose
	err = s.store.Write(ctx, func(tx Tx) error {
		empty, err := tx.Empty(ctx)
		if err != nil || !empty {
			return err
		}
		now := s.now()
		acct := &Account{ID: uuid.NewString(), Email: email, PasswordHash: hash, PlatformAdmin: true, CreatedAt: now}
		if err := tx.CreateAccount(ctx, acct); err != nil {
			return err
		}
		ws, err := s.createWorkspace(ctx, tx, "Default", PlanSelfHosted)
		if err != nil {
			return err
		}
		res.Created, res.Workspace = true, ws
		if err := tx.SetMembership(ctx, Membership{WorkspaceID: ws.ID, AccountID: acct.ID, Role: RoleOwner}); err != nil {
			return err
		}
		// Recorded as the same changes made by a platform admin are, by
		// "system": each chain starts with how it began (docs/design.md#bootstrap).
		sys := &Actor{Email: SystemActorEmail}
		for _, ev := range []struct {
			workspace, action, targetType, target string
			meta                                  map[string]any
		}{
			{"", EventAccountCreated, targetAccount, acct.ID, map[string]any{"email": acct.Email, "platformAdmin": true}},
			{ws.ID, EventWorkspaceCreated, targetWorkspace, ws.ID, map[string]any{"name": ws.Name, "plan": string(ws.Plan)}},
			{ws.ID, EventMembershipChanged, targetAccount, acct.ID, map[string]any{"accountId": acct.ID, "email": acct.Email, "role": string(RoleOwner), "previousRole": nil}},
		} {
			if err := s.recordEvent(ctx, tx, sys, ev.workspace, ev.action, ev.targetType, ev.target, ev.meta); err != nil {
				return err
			}
		}
		return nil
	})
	if !res.Created {
		res.Password = ""
	}
	return res, err
}

// createWorkspace provisions a workspace with its public client key, drawing
// another UUID in the unlikely case that its 8-character prefix is taken.
func (s *Service) createWorkspace(ctx context.Context, tx Tx, name string, plan Plan) (*Workspace, error) {
	for range 5 {
		id := uuid.NewString()
		ws := &Workspace{ID: id, Name: name, Plan: plan, PublicClientKey: NewPublicClientKey(id), CreatedAt: s.now()}
		err := tx.CreateWorkspace(ctx, ws)
		if !errors.Is(err, ErrPrefixTaken) {
			return ws, err
		}
	}
	return nil, errors.New("could not draw a free workspace prefix")
}

// EffectiveLimits resolves a key's limits: the key's override, else the
// workspace default, else the server default.
func (s *Service) EffectiveLimits(k *APIKey, w *Workspace) ratelimit.Limits {
	perMinute, perDay := s.WorkspaceLimits(w)
	if k.RateLimitPerMinute != nil {
		perMinute = *k.RateLimitPerMinute
	}
	if k.RateLimitPerDay != nil {
		perDay = *k.RateLimitPerDay
	}
	return ratelimit.Limits{PerMinute: perMinute, PerDay: perDay}
}

// WorkspaceLimits returns the defaults that apply to the workspace's keys.
func (s *Service) WorkspaceLimits(w *Workspace) (perMinute, perDay int) {
	perMinute, perDay = s.cfg.DefaultPerMinute, s.cfg.DefaultPerDay
	if w.RateLimitPerMinute != nil {
		perMinute = *w.RateLimitPerMinute
	}
	if w.RateLimitPerDay != nil {
		perDay = *w.RateLimitPerDay
	}
	return perMinute, perDay
}

func checkPage(p Page) error {
	if p.First < 1 || p.First > MaxPageSize {
		return badInput("first must be 1-%d", MaxPageSize)
	}
	return nil
}
