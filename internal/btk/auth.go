package btk

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
	"github.com/google/uuid"
)

// Request-level authentication failures (HTTP 401).
var (
	ErrKeyRevokedOrExpired = &Error{Code: CodeUnauthenticated, Message: "API key is revoked or expired"}
	ErrInvalidKey          = &Error{Code: CodeUnauthenticated, Message: "invalid API key"}
	// ErrRateLimited is the request-level failure for a key over its limit (HTTP 429).
	ErrRateLimited = &Error{Code: CodeRateLimited, Message: "rate limit exceeded"}
)

// AuthenticateKey checks a presented X-Api-Key and decides its rate limit,
// for a request of unknown origin (a key with networks is refused). The
// entry points call CheckKey, through internal/gateway; AuthenticateKey,
// AuthenticateKeyFrom and AuthenticateRequest are the same check for tests
// and benchmarks that want an Actor of their own.
func (s *Service) AuthenticateKey(ctx context.Context, plaintext string) (*Actor, ratelimit.Decision, error) {
	return s.AuthenticateRequest(ctx, plaintext, &KeyRequest{})
}

// AuthenticateKeyFrom is AuthenticateKey for a request from cl. An address
// that presents too many unknown keys is refused without a database lookup
// (docs/security.md). The use is counted against the key presented
// (docs/usage.md): accepted, refused for the rate limit, or refused as
// revoked, expired or a canary; an unknown key is counted nowhere.
func (s *Service) AuthenticateKeyFrom(ctx context.Context, plaintext string, cl Client) (*Actor, ratelimit.Decision, error) {
	return s.AuthenticateRequest(ctx, plaintext, &KeyRequest{From: cl})
}

// AuthenticateRequest checks a presented X-Api-Key for the request req and
// decides its rate limit, in docs/access.md's order: key known, not revoked
// or expired (401), network, scope (403), rate limits (429). A request
// refused before the limits uses none of them (it is counted as a refused
// use, docs/usage.md). On success it returns the workspace-only actor; the
// decision is returned also when the request is refused for its limit
// (ErrRateLimited), for the response headers. It reads the database only on
// a cache miss.
func (s *Service) AuthenticateRequest(ctx context.Context, plaintext string, req *KeyRequest) (*Actor, ratelimit.Decision, error) {
	var a Actor
	d, err := s.CheckKey(ctx, plaintext, req, &a)
	if err != nil {
		return nil, d, err
	}
	p := new(Actor) // only an accepted key's actor is allocated
	*p = a
	return p, d, nil
}

// CheckKey is AuthenticateRequest with the accepted key's workspace-only
// actor written to *a (left alone on a refusal), for a caller that keeps it
// on its stack: forward-auth answers from it and drops it.
func (s *Service) CheckKey(ctx context.Context, plaintext string, req *KeyRequest, a *Actor) (ratelimit.Decision, error) {
	cl := req.From
	var none ratelimit.Decision
	if !WellFormedKey(plaintext) { // also refuses bpk_ keys
		return none, ErrInvalidKey
	}
	var holdErr error
	if s.hold != nil {
		holdErr = s.checkHold()
	}
	var buf [KeyLen]byte // hashed from the stack: HashKey's conversion allocates
	hash := sha256.Sum256(append(buf[:0], plaintext...))
	prefix := plaintext[len(KeyPrefix):DisplayPrefixLen]
	k, w, rev, gen := s.cache.get(hash, prefix)
	if holdErr != nil && !refusedWithoutHold(k, w, s.now()) {
		return none, holdErr
	}
	s.cfg.Observer.KeyCacheLookup(k != nil && w != nil)
	fresh := false // k and w were read from the database for this request
	for attempt := 0; ; attempt++ {
		if k == nil || w == nil {
			var ip string
			if k == nil { // a key this node does not know
				ip = cl.addr(ctx)
				if err := s.unknown.before(hash, ip, s.now()); err != nil {
					return none, err
				}
			}
			var err error
			if k, w, err = s.loadKey(ctx, hash, k); err != nil {
				if err == ErrInvalidKey {
					s.unknown.unknown(hash, ip, s.now())
				}
				return none, err
			}
			s.cache.fill(gen, hash, k, w, rev)
			fresh = true
		}
		now := s.now()
		if k.Canary { // a trap: answered as an unknown key (docs/leaks.md)
			s.counter.add(k, UseRefused, now, cl)
			return none, s.canaryRefusal(k, cl.addr(ctx), now)
		}
		// Revoked and expired are final: a cached record saying so needs no
		// shared state.
		if k.Status(now) != KeyActive {
			s.counter.add(k, UseRefused, now, cl)
			return none, ErrKeyRevokedOrExpired
		}
		// A refusal by a restriction or the workspace policy counts nothing
		// against the limits. With several instances a cached record
		// refuses only while its workspace's revision is current (an
		// updateApiKey elsewhere may have widened it): the shared state is
		// asked, counting nothing, and the key is read again only when the
		// revision moved, so refused requests read no database
		// (docs/security.md#what-a-client-can-make-the-server-hold).
		var err error = ErrKeyRevokedOrExpired
		if !policyExpired(k, w, now) {
			err = s.restrict(k, req)
		}
		if err != nil {
			if s.clustered && !fresh {
				cur, gerr := s.gate.Current(ctx, prefix)
				if gerr != nil {
					return none, fmt.Errorf("%w: %w", ErrUnavailable, gerr)
				}
				if cur != rev || cur.Token == "" {
					// Read under the revision just answered (obtained
					// before the read), as after a stale answer.
					s.cache.seen(prefix, cur)
					rev, gen = cur, s.cache.generation()
					if k, w, err = s.loadKey(ctx, hash, nil); err != nil {
						return none, err
					}
					s.cache.fill(gen, hash, k, w, rev)
					fresh = true
					continue
				}
			}
			s.counter.add(k, UseRefused, now, cl)
			return none, err
		}
		// The gate also records the accepted request's time, which
		// FlushUsage writes as last_used_at: no other bookkeeping, and no
		// lock shared by all keys, on the request path. k.ID is the same
		// string on every request of the key while it is cached, which the
		// in-memory limiter keeps.
		v, err := s.gate.Allow(ctx, KeyCheck{
			KeyID: k.ID, WorkspacePrefix: prefix, Limits: s.EffectiveLimits(k, w),
			Now: now, DayState: k.DayState, Seen: rev,
		})
		if err != nil {
			return none, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if !v.Stale {
			if !v.Allowed {
				s.counter.add(k, UseRateLimited, now, cl)
				return v.Decision, ErrRateLimited
			}
			s.counter.add(k, UseAccepted, now, cl)
			*a = Actor{WorkspaceID: k.WorkspaceID, KeyID: k.ID, KeyScopes: k.ScopesHeader()}
			return v.Decision, nil
		}
		// Another instance changed the workspace's keys or limits, or the
		// shared state was lost: read the key again, under the revision
		// just answered (obtained before that read, so the record cached is
		// never older than the revision it is cached under).
		if attempt == 3 {
			return none, fmt.Errorf("%w: the workspace's revision keeps changing", ErrUnavailable)
		}
		s.cache.seen(prefix, v.Current)
		rev, gen = v.Current, s.cache.generation()
		k, w, fresh = nil, nil, false
	}
}

// ErrHoldLost refuses key checks while the store has lost its hold on the
// database (InstanceHold).
var ErrHoldLost = fmt.Errorf("%w: this instance lost its lock on the database and has not taken it back", ErrUnavailable)

// refusedWithoutHold reports whether a cached record refuses the key
// whatever another instance did while the hold was lost: a canary, or a key
// revoked or expired, which nothing brings back. A lost hold only stops
// keys from being accepted (docs/clusters.md#postgresql).
func refusedWithoutHold(k *APIKey, w *Workspace, now time.Time) bool {
	return k != nil && w != nil && (k.Canary || k.Status(now) != KeyActive)
}

// checkHold refuses while the store's hold on the database is lost, and
// forgets what was cached when it was taken again since: another instance
// may have revoked keys meanwhile.
func (s *Service) checkHold() error {
	taken, held := s.hold.InstanceHold()
	if !held {
		return ErrHoldLost
	}
	if seen := s.holdTaken.Load(); taken != seen {
		s.cache.dropAll() // before the new count is stored: no request trusts the old records under it
		s.holdTaken.CompareAndSwap(seen, taken)
	}
	return nil
}

// CountUse counts one use of k that an entry point refused after the key
// check (a restriction: network, scope), or that the key check refused
// without this service's AuthenticateKeyFrom, as outcome o from cl.
func (s *Service) CountUse(k *APIKey, o UseOutcome, cl Client) {
	s.counter.add(k, o, s.now(), cl)
}

// loadKey reads a key (unless known) and its workspace from the database.
func (s *Service) loadKey(ctx context.Context, hash [32]byte, k *APIKey) (*APIKey, *Workspace, error) {
	var w *Workspace
	err := s.store.Read(ctx, func(tx Tx) error {
		var err error
		if k == nil {
			if k, err = tx.APIKeyByHash(ctx, hash[:]); err != nil {
				return err
			}
		}
		w, err = tx.Workspace(ctx, k.WorkspaceID)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil, ErrInvalidKey
	}
	if err != nil {
		return nil, nil, err
	}
	if k.restrictions == nil {
		k.prepare()
	}
	return k, w, nil
}

// FlushUsage writes every last_used_at time and per-day limiter state
// collected so far in one batch, and lets the limiter forget keys that are
// idle. The server calls it at shutdown (FlushDueUsage about once a second).
func (s *Service) FlushUsage(ctx context.Context) error {
	return s.flushUsage(ctx, true)
}

// ResolveSession checks a bearer token and returns its actor. The session row
// is read on every request so that logout takes effect at once.
func (s *Service) ResolveSession(ctx context.Context, token string) (*Actor, error) {
	claims, err := s.tokens.ParseSession(token)
	if err != nil {
		return nil, err
	}
	a := &Actor{AccountID: claims.AccountID, SessionID: claims.SessionID}
	err = s.store.Read(ctx, func(tx Tx) error {
		sess, err := tx.Session(ctx, claims.SessionID)
		if err != nil {
			return err
		}
		if sess.AccountID != claims.AccountID || sess.RevokedAt != nil || !s.now().Before(sess.ExpiresAt) {
			return ErrInvalidSession
		}
		acct, err := tx.Account(ctx, sess.AccountID)
		if err != nil {
			return err
		}
		if acct.DisabledAt != nil {
			return ErrInvalidSession
		}
		a.Email, a.PlatformAdmin = acct.Email, acct.PlatformAdmin
		a.WorkspaceID, a.Impersonating = sess.WorkspaceID, sess.Impersonating && acct.PlatformAdmin
		if a.WorkspaceID != "" {
			a.Role, err = tx.Role(ctx, a.WorkspaceID, a.AccountID)
			if errors.Is(err, ErrNotFound) {
				err = nil
				if !a.Impersonating { // membership removed since login
					return ErrInvalidSession
				}
			}
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, ErrInvalidSession
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// CheckElevation marks the actor elevated when token is a valid elevation
// token for its account and session.
func (s *Service) CheckElevation(a *Actor, token string) {
	if a.IsUser() && token != "" {
		a.Elevated = s.tokens.CheckElevation(token, a.AccountID, a.SessionID)
	}
}

// SessionInfo is a new session: its token and what it acts as.
type SessionInfo struct {
	Token     string
	ExpiresAt time.Time
	Account   *Account
	Role      Role
	Workspace *Workspace // nil for a session without a workspace
	// SessionID names the session (for its audit event).
	SessionID string
	// Memberships are the account's memberships (login only).
	Memberships []MembershipInfo
	// DeviceToken is the client's device token (login only): keep it and
	// present it at the next login (docs/security.md).
	DeviceToken string
}

// Login checks an email and password and opens a session. With no
// workspaceID and exactly one membership, that workspace is chosen.
func (s *Service) Login(ctx context.Context, email, password, workspaceID string) (*SessionInfo, error) {
	return s.LoginTo(ctx, email, password, workspaceID, "")
}

// LoginTo is Login into the workspace named by id or, when id is "", by
// name among the account's memberships. An account with several
// memberships that names none gets a *WorkspaceChoiceError listing them.
// The session.login event is written in the session's transaction; a
// failed login writes nothing.
func (s *Service) LoginTo(ctx context.Context, email, password, workspaceID, workspaceName string) (*SessionInfo, error) {
	return s.login(ctx, email, password, workspaceID, workspaceName, false)
}

// LoginFirst is Login, except that an account with several workspaces that
// names none is logged in to the first of them (the dashboard, whose
// switcher offers the others) rather than asked to choose: one password
// check either way.
func (s *Service) LoginFirst(ctx context.Context, email, password, workspaceID string) (*SessionInfo, error) {
	return s.login(ctx, email, password, workspaceID, "", true)
}

func (s *Service) login(ctx context.Context, email, password, workspaceID, workspaceName string, first bool) (*SessionInfo, error) {
	var acct *Account
	var ms []MembershipInfo
	err := s.store.Read(ctx, func(tx Tx) error {
		var err error
		if acct, err = accountByEmail(ctx, tx, email); err != nil {
			return err
		}
		ms, err = tx.Memberships(ctx, acct.ID)
		return err
	})
	// The password is checked outside any transaction (argon2id is slow on
	// purpose) and before any other failure is told, so nothing is learnt
	// about an account without its password.
	hash := dummyPasswordHash() // an unknown email costs what a wrong password does
	at := attempt{account: email, ip: clientIPFrom(ctx)}
	if acct != nil {
		hash = acct.PasswordHash
		at.account, at.known = acct.ID, true
		at.device = s.tokens.CheckDevice(deviceTokenFrom(ctx), acct.ID)
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ok, gateErr := s.passwords.checkAttempt(ctx, s.now(), at, hash, password)
	if gateErr != nil {
		return nil, gateErr
	}
	if acct == nil || !ok {
		return nil, ErrBadCredentials
	}
	if acct.DisabledAt != nil { // told only to who knows the password
		return nil, ErrAccountDisabled
	}
	if err != nil {
		return nil, err
	}
	if first && workspaceID == "" && workspaceName == "" && len(ms) > 1 {
		workspaceID = ms[0].WorkspaceID
	}
	m, err := chooseWorkspace(ms, workspaceID, workspaceName)
	if errors.Is(err, ErrNotFound) {
		return nil, Errorf(CodeNotFound, "no membership in that workspace")
	}
	if err != nil {
		return nil, err
	}
	var info *SessionInfo
	err = s.store.Write(ctx, func(tx Tx) (err error) {
		if info, err = s.openSession(ctx, tx, acct, m.WorkspaceID, m.Role, false, s.now().Add(SessionTTL)); err != nil {
			return err
		}
		a := &Actor{AccountID: acct.ID, Email: acct.Email, IP: clientIPFrom(ctx), UserAgent: clientRequestFrom(ctx).userAgent}
		return s.recordEvent(ctx, tx, a, m.WorkspaceID, EventSessionLogin, targetSession, info.SessionID,
			requestMeta(a, map[string]any{"role": string(m.Role)}))
	})
	if err != nil {
		return nil, err
	}
	info.Memberships = ms
	// The client keeps its device token: the one it presented, or a new one.
	info.DeviceToken = deviceTokenFrom(ctx)
	if at.device == "" {
		info.DeviceToken = s.tokens.DeviceToken(acct.ID)
	}
	return info, nil
}

// openSession opens a session that ends at expires: SessionTTL after the
// password was checked.
func (s *Service) openSession(ctx context.Context, tx Tx, acct *Account, workspaceID string, role Role, impersonating bool, expires time.Time) (*SessionInfo, error) {
	sess := &Session{
		ID: uuid.NewString(), AccountID: acct.ID, WorkspaceID: workspaceID,
		Impersonating: impersonating, CreatedAt: s.now(), ExpiresAt: expires,
	}
	info := &SessionInfo{Account: acct, Role: role, ExpiresAt: sess.ExpiresAt}
	if workspaceID != "" {
		var err error
		if info.Workspace, err = tx.Workspace(ctx, workspaceID); err != nil {
			return nil, err
		}
	}
	if err := tx.CreateSession(ctx, sess); err != nil {
		return nil, err
	}
	info.Token, info.SessionID = s.tokens.SessionToken(sess), sess.ID
	return info, nil
}

// Logout ends the actor's session.
func (s *Service) Logout(ctx context.Context, a *Actor) error {
	if err := authorize(a, permUser, ""); err != nil {
		return err
	}
	return s.store.Write(ctx, func(tx Tx) error {
		return tx.RevokeSession(ctx, a.SessionID, s.now())
	})
}

// Elevate checks the actor's password again and returns a 5-minute token for
// X-Elevation, bound to the account and session.
func (s *Service) Elevate(ctx context.Context, a *Actor, password string) (string, time.Time, error) {
	if err := authorize(a, permUser, ""); err != nil {
		return "", time.Time{}, err
	}
	var acct *Account
	err := s.store.Read(ctx, func(tx Tx) (err error) {
		acct, err = tx.Account(ctx, a.AccountID)
		return err
	})
	if err != nil {
		return "", time.Time{}, err
	}
	ok, err := s.passwords.check(ctx, s.now(), acct.ID, a.IP, acct.PasswordHash, password)
	if err != nil {
		return "", time.Time{}, err
	}
	if !ok {
		return "", time.Time{}, ErrWrongPassword // a refused elevation writes nothing
	}
	token, exp := s.tokens.ElevationToken(a.AccountID, a.SessionID)
	// The token is handed out only once its event is committed.
	err = s.store.Write(ctx, func(tx Tx) error {
		return s.recordEvent(ctx, tx, a, a.WorkspaceID, EventSessionElevated, targetSession, a.SessionID,
			requestMeta(a, map[string]any{"expiresAt": exp}))
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return token, exp, nil
}

// KeyWatchInterval is how often a proxied connection that outlives its
// request (an upgrade, a stream) checks that its key is still valid
// (docs/security.md): on one node the check reads the key cache, which
// every change empties at once; with several instances it reads the
// database, the source of truth every instance shares.
//
// With several instances the interval and the age of a shared answer
// (keyRecheckShared) add up to a second.
func (s *Service) KeyWatchInterval() time.Duration {
	if s.clustered {
		return time.Second - keyRecheckShared
	}
	return 500 * time.Millisecond
}

// KeyStillValid reports whether a key accepted earlier for req is still
// valid (not revoked, replaced by a rotation, expired, or older than its
// workspace's maximum lifetime) and would still be accepted for req: its
// networks and the access rules in force (an updateApiKey that narrowed
// the key, or rules reloaded on SIGHUP), without counting a request. req
// nil checks the key alone. An error is a store that did not answer: the
// caller decides.
func (s *Service) KeyStillValid(ctx context.Context, plaintext string, req *KeyRequest) (bool, error) {
	if !WellFormedKey(plaintext) {
		return false, nil
	}
	hash := sha256.Sum256([]byte(plaintext))
	// A key older than its workspace's maximum lifetime is expired too
	// (docs/access.md#workspace-key-policy).
	valid := func(k *APIKey, w *Workspace) bool {
		if k == nil {
			return false
		}
		now := s.now()
		if k.Status(now) != KeyActive || policyExpired(k, w, now) {
			return false
		}
		return req == nil || s.restrict(k, req) == nil
	}
	if s.hold != nil {
		if err := s.checkHold(); err != nil {
			return false, err
		}
	}
	if !s.clustered {
		if k, w, _, _ := s.cache.get(hash, plaintext[len(KeyPrefix):DisplayPrefixLen]); k != nil && w != nil {
			return valid(k, w), nil
		}
	}
	rec, err := s.rechecks.check(ctx, hash, func() (keyRecord, error) {
		var k *APIKey
		var w *Workspace
		err := s.store.Read(ctx, func(tx Tx) (err error) {
			if k, err = tx.APIKeyByHash(ctx, hash[:]); err != nil {
				return err
			}
			w, err = tx.Workspace(ctx, k.WorkspaceID)
			return err
		})
		if errors.Is(err, ErrNotFound) {
			return keyRecord{}, nil
		}
		if err != nil {
			return keyRecord{}, err
		}
		k.prepare() // shared by the connections of the key: parsed once
		return keyRecord{k, w}, nil
	})
	if err != nil {
		return false, err
	}
	return valid(rec.key, rec.workspace), nil
}

// keyRecord is a key as KeyStillValid read it (key nil: no such key).
type keyRecord struct {
	key       *APIKey
	workspace *Workspace
}

// keyRecheckShared is how long the database's answer to KeyStillValid is
// shared by the connections of the same key.
const keyRecheckShared = 250 * time.Millisecond

// maxKeyRechecks bounds the keys whose answers are kept.
const maxKeyRechecks = 100_000

// keyRechecks shares the database reads of KeyStillValid between the
// proxied connections of one key (docs/security.md): each connection
// rechecks its key every KeyWatchInterval, so 5,000 streams opened with one
// key were 5,000 database reads a second; now a key costs at most one read
// per keyRecheckShared, whatever its number of connections, and reads of
// the same key under way at once are one read.
type keyRechecks struct {
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*keyRecheck
	now func() time.Time // the wall clock (tests set it)
}

type keyRecheck struct {
	rec  keyRecord
	at   time.Time     // when the read began
	done chan struct{} // closed when the read has answered
	err  error
}

func (r *keyRechecks) check(ctx context.Context, hash [sha256.Size]byte, read func() (keyRecord, error)) (keyRecord, error) {
	now := r.clock()
	r.mu.Lock()
	c := r.m[hash]
	if c != nil {
		select {
		case <-c.done:
			if c.err == nil && now.Sub(c.at) < keyRecheckShared {
				r.mu.Unlock()
				return c.rec, nil
			}
		default: // a read under way: its answer is as fresh as a new one
			r.mu.Unlock()
			select {
			case <-c.done:
				if c.err == nil {
					return c.rec, nil
				}
				return keyRecord{}, c.err
			case <-ctx.Done():
				return keyRecord{}, ctx.Err()
			}
		}
	}
	if r.m == nil || len(r.m) >= maxKeyRechecks {
		r.m = make(map[[sha256.Size]byte]*keyRecheck)
	}
	c = &keyRecheck{at: now, done: make(chan struct{})}
	r.m[hash] = c
	r.mu.Unlock()
	c.rec, c.err = read()
	close(c.done)
	return c.rec, c.err
}

func (r *keyRechecks) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}
