package btk

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/btk-project/btk/internal/ratelimit"
)

// Leak response (docs/leaks.md): finding a key by the hash of its secret,
// revoking reported keys, and canary keys.

// Audit actions of leak response (audit_events).
const (
	EventKeyLeaked     = "api_key.leaked"
	EventCanaryUsed    = "api_key.canary_used"
	leakReportActor    = "leak report"
	canaryActor        = "canary"
	maxClientString    = 256 // stored client strings (user agent, url) are cut here
	canaryWindow       = time.Minute
	maxCanaryTallies   = 10_000
	MaxLeakReports     = 1000    // entries in one report
	MaxLeakReportBytes = 1 << 20 // body of one report
	maxLeakTokenLen    = 1024
	// MaxLeakReportBytesHeld bounds the bytes of report bodies held at
	// once, as received (a body can be verified only once it is whole, and
	// the identifiers of GitHub's signing keys are public). Bytes, not
	// bodies: 16 connections announcing a 1 MiB body and sending a byte a
	// second held every slot of a count, and no report was read, the
	// platform admin's included; to hold these bytes a client must send them.
	MaxLeakReportBytesHeld = 16 << 20
	// LeakReportReadTime bounds the reading of one report's body.
	LeakReportReadTime = 10 * time.Second
)

// Refusals of POST /v1/leaks.
var (
	ErrLeakReportRefused   = &Error{Code: CodeUnauthenticated, Message: "a leak report must be signed by a listed key or sent by a platform admin"}
	ErrTooManyLeakAttempts = &Error{Code: CodeRateLimited, Message: "too many unsigned leak reports from this address; try again later"}
	ErrLeakReportsBusy     = &Error{Code: CodeUnavailable, Message: "too many leak reports are being received at once; retry shortly"}
)

// Label values of a leak report's answer (GitHub's false-positive feedback
// vocabulary).
const (
	LabelTruePositive  = "true_positive"
	LabelFalsePositive = "false_positive"
)

// ---- Lookup by the secret ----

// KeyByHash finds a key by the hex SHA-256 of its plaintext. The owner tier
// sees its own workspace's keys, a platform admin any; anything else is nil,
// so the existence of a key is never revealed. The workspace is returned
// with the key.
func (s *Service) KeyByHash(ctx context.Context, a *Actor, hexHash string) (*APIKey, *Workspace, error) {
	if a == nil {
		return nil, nil, ErrUnauthenticated
	}
	hash, err := parseKeyHash(hexHash)
	if err != nil {
		return nil, nil, err
	}
	if !a.IsUser() || !a.PlatformAdmin && !a.OwnerTier() {
		return nil, nil, nil
	}
	var k *APIKey
	var w *Workspace
	err = s.store.Read(ctx, func(tx Tx) (err error) {
		if k, err = tx.APIKeyByHash(ctx, hash); err != nil {
			return err
		}
		if !a.PlatformAdmin && k.WorkspaceID != a.WorkspaceID {
			return ErrNotFound
		}
		if w, err = tx.Workspace(ctx, k.WorkspaceID); err != nil {
			return err
		}
		withPolicy(w, k)
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return k, w, nil
}

func parseKeyHash(h string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(h)))
	if err != nil || len(b) != sha256.Size {
		return nil, badInput("sha256 must be the 64 hex digits of a SHA-256")
	}
	return b, nil
}

// ---- Leak reports ----

// LeakReport is one entry of a report in GitHub's secret-scanning partner
// format.
type LeakReport struct {
	Token  string `json:"token"`
	Type   string `json:"type"`
	URL    string `json:"url"`
	Source string `json:"source"`
}

// LeakLabel is the answer about one reported token: never the token itself.
type LeakLabel struct {
	TokenHash string `json:"token_hash"`
	TokenType string `json:"token_type"`
	Label     string `json:"label"`
}

// ParseLeakReports reads a report body: a JSON array of at most
// MaxLeakReports entries, each with a token.
func ParseLeakReports(body []byte) ([]LeakReport, error) {
	if len(body) > MaxLeakReportBytes {
		return nil, badInput("a leak report is at most %d bytes", MaxLeakReportBytes)
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '[' {
		return nil, badInput("a leak report is a JSON array of {token, type, url, source}")
	}
	var reports []LeakReport
	if err := json.Unmarshal(body, &reports); err != nil {
		return nil, badInput("a leak report is a JSON array of {token, type, url, source}")
	}
	if len(reports) > MaxLeakReports {
		return nil, badInput("a leak report has at most %d entries", MaxLeakReports)
	}
	for _, r := range reports {
		if r.Token == "" || len(r.Token) > maxLeakTokenLen {
			return nil, badInput("every entry needs a token of 1-%d bytes", maxLeakTokenLen)
		}
	}
	return reports, nil
}

// Reporter is who sent a leak report: a platform admin (Actor), or the
// holder of a report signing key (KeyID), from an address.
type Reporter struct {
	Actor     *Actor
	KeyID     string
	IP        string
	UserAgent string
}

// ReportLeaks revokes every reported token that is a key not yet revoked,
// each with its audit pair (REVOKED / api_key.leaked, with the report's url
// and source), and tells every instance. It answers a label for each
// token: true_positive for a token that is or was a btk key. A replayed
// report changes nothing and answers the same. Canary keys are labelled but
// not revoked: they are never accepted anyway, and their use stays recorded.
// The caller has checked the signature (KeyID) or passes a platform admin.
func (s *Service) ReportLeaks(ctx context.Context, by Reporter, reports []LeakReport) ([]LeakLabel, error) {
	if by.KeyID == "" && (by.Actor == nil || !by.Actor.PlatformAdmin) {
		return nil, ErrUnauthenticated
	}
	if len(reports) > MaxLeakReports {
		return nil, badInput("a leak report has at most %d entries", MaxLeakReports)
	}
	labels := make([]LeakLabel, len(reports))
	var candidates []int
	for i, r := range reports {
		h := HashKey(r.Token)
		labels[i] = LeakLabel{TokenHash: hex.EncodeToString(h[:]), TokenType: clientString(r.Type), Label: LabelFalsePositive}
		if WellFormedKey(r.Token) {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return labels, nil
	}
	var revoked []*APIKey
	var marks untold
	workspaces := map[string]bool{}
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		revoked, workspaces = revoked[:0], map[string]bool{} // a retried transaction starts over
		now := s.now()
		// Find the keys first, then lock and revoke them in key-id order,
		// the order of revoke-all and the usage flush: reports naming the
		// same keys in other orders wait for each other instead of
		// deadlocking, and each key is read again under its lock, so a key
		// another report revoked meanwhile is seen revoked (not revoked
		// twice, nor the whole report failed).
		type found struct {
			i  int
			id string
		}
		var keys []found
		for _, i := range candidates {
			h := HashKey(reports[i].Token)
			k, err := tx.APIKeyByHash(ctx, h[:])
			if errors.Is(err, ErrNotFound) {
				labels[i].Label = LabelFalsePositive
				continue
			}
			if err != nil {
				return err
			}
			labels[i].Label = LabelTruePositive
			workspaces[k.WorkspaceID] = true
			keys = append(keys, found{i, k.ID})
		}
		slices.SortStableFunc(keys, func(a, b found) int { return strings.Compare(a.id, b.id) })
		for _, f := range keys {
			i := f.i
			k, err := tx.APIKey(ctx, f.id)
			if err != nil {
				return err
			}
			if k.RevokedAt != nil || k.Canary {
				continue
			}
			a := &Actor{Email: leakReportActor, WorkspaceID: k.WorkspaceID, IP: by.IP, UserAgent: clientString(by.UserAgent)}
			meta := map[string]any{
				"name": k.Name, "url": clientString(reports[i].URL), "source": clientString(reports[i].Source),
				"type": clientString(reports[i].Type),
			}
			if by.KeyID != "" {
				meta["reportKey"] = by.KeyID
			} else {
				a.AccountID = by.Actor.AccountID
				meta["reportedBy"] = by.Actor.Email
			}
			if err := tx.RevokeAPIKey(ctx, k.ID, now, a.AccountID, ""); err != nil {
				return err
			}
			if err := s.auditAs(ctx, tx, a, AuditEntry{Action: AuditRevoked, APIKeyID: k.ID, APIKeyName: k.Name}, EventKeyLeaked, meta); err != nil {
				return err
			}
			revoked = append(revoked, k)
		}
		if len(revoked) == 0 {
			return nil
		}
		// Told by the next sweep run should every tell below fail and
		// the report not be repeated (untold.go).
		ids := map[string]bool{}
		for _, k := range revoked {
			ids[k.WorkspaceID] = true
		}
		marks, err = s.markUntold(ctx, tx, slices.Collect(maps.Keys(ids))...)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, k := range revoked {
		s.forgetKey(k)
	}
	// Every workspace of a true positive is told again, also on a replay:
	// an earlier answer may have failed to tell the other instances.
	var errs []error
	done := untold{}
	for ws := range workspaces {
		if err := s.changed(ctx, ws); err != nil {
			errs = append(errs, err)
		} else if mark, ok := marks[ws]; ok {
			done[ws] = mark
		}
	}
	// Told: should taking them off the list fail, the next sweep tells
	// once more, which costs the instances one more read of those keys.
	_ = s.told(ctx, done)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return labels, nil
}

// Unsigned or failed leak report attempts per client address.
var leakAttempts = ratelimit.Limits{PerMinute: 30, PerDay: 1000}

// AllowLeakAttempt counts one leak report that is not validly signed from
// the address and reports whether it is within the address's budget.
func (s *Service) AllowLeakAttempt(ctx context.Context, ip string) (bool, error) {
	d, err := s.passwords.limiter.Allow(ctx, "leaks:"+addressKey(ip), leakAttempts, s.now())
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return d.Allowed, nil
}

// ForgetLeakAttempts clears the address's count of leak reports that were
// not validly signed, after a platform admin's report from it: the budget
// is for addresses that keep sending bad reports, and an admin's scanner
// posts many good ones.
func (s *Service) ForgetLeakAttempts(ctx context.Context, ip string) {
	_ = s.passwords.limiter.Forget(ctx, "leaks:"+addressKey(ip)) // not told: the count stays, stricter
}

// clientString cuts a client-sent string that is stored (docs/security.md).
func clientString(s string) string { return truncate(s, maxClientString) }

// ---- Report signing keys ----

// LeakReportKeys are the public keys whose signatures make a leak report
// acceptable (GitHub's scheme: ECDSA P-256 / SHA-256 over the raw body,
// base64 DER signature), by identifier.
type LeakReportKeys struct {
	byID map[string]*ecdsa.PublicKey
}

// ParseLeakReportKeys reads PEM public keys (PKIX). A key's identifier is the
// hex SHA-256 of its DER SubjectPublicKeyInfo, or the value of a
// "# id: ..." line before its PEM block.
func ParseLeakReportKeys(data []byte) (*LeakReportKeys, error) {
	keys := &LeakReportKeys{byID: map[string]*ecdsa.PublicKey{}}
	rest := data
	for {
		var block *pem.Block
		before := rest
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(stripComments(before))) != 0 {
				return nil, errors.New("leak report keys: text that is not a PEM block")
			}
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("leak report keys: a %q block; want PUBLIC KEY", block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("leak report keys: %w", err)
		}
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok || ec.Curve != elliptic.P256() {
			return nil, errors.New("leak report keys: only ECDSA P-256 public keys are accepted")
		}
		id := commentID(before[:len(before)-len(rest)])
		if id == "" {
			sum := sha256.Sum256(block.Bytes)
			id = hex.EncodeToString(sum[:])
		}
		if _, dup := keys.byID[id]; dup {
			return nil, fmt.Errorf("leak report keys: the identifier %s is used twice", id)
		}
		keys.byID[id] = ec
	}
	return keys, nil
}

// commentID finds the last "# id: X" line of the text before a PEM block.
func commentID(chunk []byte) string {
	if i := bytes.Index(chunk, []byte("-----BEGIN")); i >= 0 {
		chunk = chunk[:i]
	}
	id := ""
	for _, line := range strings.Split(string(chunk), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "#"); ok {
			if v, ok := strings.CutPrefix(strings.TrimSpace(v), "id:"); ok {
				id = strings.TrimSpace(v)
			}
		}
	}
	return id
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, t...)
		}
	}
	return out
}

// Len is the number of keys.
func (k *LeakReportKeys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.byID)
}

// Has reports whether id names one of the keys.
func (k *LeakReportKeys) Has(id string) bool {
	return k != nil && id != "" && k.byID[strings.TrimSpace(id)] != nil
}

// Verify reports whether sig (base64 of an ASN.1 DER ECDSA signature) is the
// signature of body by the key named id.
func (k *LeakReportKeys) Verify(id, sig string, body []byte) bool {
	if k == nil || id == "" || sig == "" {
		return false
	}
	pub := k.byID[strings.TrimSpace(id)]
	if pub == nil {
		return false
	}
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
	if err != nil || len(der) > 128 {
		return false
	}
	sum := sha256.Sum256(body)
	return ecdsa.VerifyASN1(pub, sum[:], der)
}

// ---- Canary keys ----

type canaryTally struct {
	count int       // uses not recorded yet
	tried time.Time // when this instance last tried to record
	// negUntil (unix ns) mimics the negative cache of unknown keys.
	negUntil int64
}

// canaryBook counts the uses of canary keys between records; bounded (only
// existing canary keys enter it, and at most maxCanaryTallies of them).
type canaryBook struct {
	mu sync.Mutex
	m  map[string]*canaryTally
	// unrecorded holds, per key, the record that could not be written, for
	// the next usage flush (at most maxCanaryTallies; the first kept stays).
	unrecorded map[string]*canaryRecord
	// running counts the records GoRecordCanaryUse started.
	running inflight
}

// canaryRecord is one canary use to write as an audit event.
type canaryRecord struct {
	key  *APIKey
	a    *Actor
	path string
	at   time.Time // when the use was seen
}

// keep holds rec for the next usage flush; the caller holds b.mu.
func (b *canaryBook) keep(rec *canaryRecord) {
	if b.unrecorded == nil {
		b.unrecorded = map[string]*canaryRecord{}
	}
	if _, ok := b.unrecorded[rec.key.ID]; ok || len(b.unrecorded) >= maxCanaryTallies {
		return
	}
	b.unrecorded[rec.key.ID] = rec
}

// inflight counts running goroutines that shutdown waits for; unlike a
// sync.WaitGroup, add may run while wait does (a request drained late).
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
}

func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tally is the tally of canary key id, made when missing; the caller holds
// b.mu. The map is bounded: full, it starts over (it holds only canary
// keys, which only owners make).
func (b *canaryBook) tally(id string) *canaryTally {
	if b.m == nil || len(b.m) >= maxCanaryTallies && b.m[id] == nil {
		b.m = map[string]*canaryTally{}
	}
	t := b.m[id]
	if t == nil {
		t = &canaryTally{}
		b.m[id] = t
	}
	return t
}

type clientRequestKey struct{}

type clientRequest struct{ userAgent, path string }

// WithClientRequest records the request's user agent and path for the
// anonymous operations (login) that have no actor to carry them.
func WithClientRequest(ctx context.Context, userAgent, path string) context.Context {
	return context.WithValue(ctx, clientRequestKey{}, clientRequest{clientString(userAgent), clientString(path)})
}

func clientRequestFrom(ctx context.Context) clientRequest {
	r, _ := ctx.Value(clientRequestKey{}).(clientRequest)
	return r
}

// CanaryUse is AuthenticateKey's refusal of a canary key. To its caller it
// is the refusal an unknown key presented from the same address would get
// (errors.Is, ErrorCode and ErrorMessage say so): ErrInvalidKey, or
// ErrTooManyUnknownKeys for an address over its budget of unknown keys.
// RecordCanaryUse records it.
type CanaryUse struct {
	key    *APIKey
	answer *Error
}

func (c *CanaryUse) Error() string { return c.answer.Message }
func (c *CanaryUse) Unwrap() error { return c.answer }

// canaryRefusal answers a canary key presented from addr exactly as an
// unknown key would be (unknownkeys.go): a key looked up within the last
// negativeTTL is invalid at once; otherwise an address over its budget of
// unknown keys is refused, and any other lookup spends from that budget.
// The canary is never put in the negative cache itself, so that its uses
// keep reaching RecordCanaryUse.
func (s *Service) canaryRefusal(k *APIKey, addr string, now time.Time) error {
	t := now.UnixNano()
	s.canaries.mu.Lock()
	tally := s.canaries.tally(k.ID)
	if t < tally.negUntil {
		s.canaries.mu.Unlock()
		return &CanaryUse{key: k, answer: ErrInvalidKey}
	}
	s.canaries.mu.Unlock()
	u := s.unknown
	u.mu.Lock()
	if until, ok := u.blocked[addr]; ok && t < until {
		u.mu.Unlock()
		return &CanaryUse{key: k, answer: ErrTooManyUnknownKeys}
	}
	u.mu.Unlock()
	d := u.spent.Allow(addressKey(addr), unknownKeyLookups, now, 0)
	if !d.Allowed {
		u.mu.Lock()
		dropSome(u.blocked)
		u.blocked[addr] = t + int64(d.RetryAfter)
		u.mu.Unlock()
	}
	s.canaries.mu.Lock()
	s.canaries.tally(k.ID).negUntil = t + int64(negativeTTL)
	s.canaries.mu.Unlock()
	return &CanaryUse{key: k, answer: ErrInvalidKey}
}

// RecordCanaryUse records the use of a canary key when err is a *CanaryUse
// (anything else records nothing): at most once a minute per key across
// instances (canary_marks), with the count of uses this instance saw since
// it last recorded, the client's address, user agent and path. A record that
// cannot be written (the database is unreachable) is logged at WARN and kept:
// the next usage flush that reaches the database writes it, and the flush at
// shutdown reports it if it never could (docs/leaks.md). It returns once the
// record is written or kept.
func (s *Service) RecordCanaryUse(ctx context.Context, err error, ip, userAgent, path string) {
	var c *CanaryUse
	if !errors.As(err, &c) || c.key.RevokedAt != nil {
		return
	}
	k := c.key
	now := s.now()
	s.canaries.mu.Lock()
	t := s.canaries.tally(k.ID)
	t.count++
	if !t.tried.IsZero() && now.Sub(t.tried) < canaryWindow {
		s.canaries.mu.Unlock()
		return
	}
	t.tried = now
	s.canaries.mu.Unlock()

	rec := &canaryRecord{key: k, a: &Actor{Email: canaryActor, IP: clientString(ip), UserAgent: clientString(userAgent)}, path: clientString(path), at: now}
	// The client hanging up does not stop the record; a database that does
	// not answer does, in time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), canaryRecordTimeout)
	defer cancel()
	if err := s.writeCanary(ctx, rec); err != nil {
		s.canaries.mu.Lock()
		s.canaries.keep(rec)
		s.canaries.mu.Unlock()
		s.cfg.Log.Warn("a canary key's use could not be recorded yet; the next usage flush retries it",
			"key", k.ID, "workspace", k.WorkspaceID, "err", err)
	}
}

// GoRecordCanaryUse runs RecordCanaryUse apart from the request, so that
// neither a slow database nor the once-a-minute write delays the answer;
// WaitCanaryRecords waits for it.
func (s *Service) GoRecordCanaryUse(ctx context.Context, err error, ip, userAgent, path string) {
	if !IsCanaryUse(err) {
		return
	}
	s.canaries.running.add()
	go func() {
		defer s.canaries.running.done()
		s.RecordCanaryUse(ctx, err, ip, userAgent, path)
	}()
}

// WaitCanaryRecords waits, until ctx ends, for the records GoRecordCanaryUse
// started: at shutdown, before the final flush writes those that failed.
func (s *Service) WaitCanaryRecords(ctx context.Context) error {
	return s.canaries.running.wait(ctx)
}

// UnrecordedCanaryUses is how many canary key uses of how many keys are
// kept because their record could not be written.
func (s *Service) UnrecordedCanaryUses() (uses, keys int) {
	s.canaries.mu.Lock()
	defer s.canaries.mu.Unlock()
	for id := range s.canaries.unrecorded {
		keys++
		if t := s.canaries.m[id]; t != nil {
			uses += max(t.count, 1)
		} else {
			uses++
		}
	}
	return uses, keys
}

// recordKeptCanaries writes the canary records that failed before (the
// database is answering again: a usage flush just wrote). A record another
// instance's mark pre-empted is done: the key's use is recorded, and this
// instance's count goes with its next record.
func (s *Service) recordKeptCanaries(ctx context.Context) error {
	s.canaries.mu.Lock()
	recs := make([]*canaryRecord, 0, len(s.canaries.unrecorded))
	for _, r := range s.canaries.unrecorded {
		recs = append(recs, r)
	}
	s.canaries.mu.Unlock()
	for _, r := range recs {
		if err := s.writeCanary(ctx, r); err != nil {
			return fmt.Errorf("canary record: %w", err)
		}
		s.canaries.mu.Lock()
		if s.canaries.unrecorded[r.key.ID] == r {
			delete(s.canaries.unrecorded, r.key.ID)
		}
		s.canaries.mu.Unlock()
	}
	return nil
}

// writeCanary writes rec unless another record of the key was written
// within canaryWindow, with the uses counted since the last record; those
// it wrote leave the tally.
func (s *Service) writeCanary(ctx context.Context, rec *canaryRecord) error {
	k := rec.key
	s.canaries.mu.Lock()
	n := max(s.canaries.tally(k.ID).count, 1)
	s.canaries.mu.Unlock()
	now := s.now()
	won := false
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		if won, err = tx.ClaimCanaryMark(ctx, k.ID, now, now.Add(-canaryWindow)); err != nil || !won {
			return err
		}
		return s.recordEvent(ctx, tx, rec.a, k.WorkspaceID, EventCanaryUsed, "api_key", k.ID,
			requestMeta(rec.a, map[string]any{"name": k.Name, "path": rec.path, "count": n, "seenAt": rec.at.UTC().Format(time.RFC3339Nano)}))
	})
	if err == nil && won {
		s.canaries.mu.Lock()
		if t := s.canaries.m[k.ID]; t != nil {
			t.count = max(0, t.count-n)
		}
		s.canaries.mu.Unlock()
	}
	return err
}

// canaryRecordTimeout bounds the write of a canary use.
const canaryRecordTimeout = 10 * time.Second

// IsCanaryUse reports a refusal that was a canary key's (RecordCanaryUse
// records it).
func IsCanaryUse(err error) bool {
	var c *CanaryUse
	return errors.As(err, &c)
}
