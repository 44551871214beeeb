package btk

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Token lifetimes (docs/design.md#sessions-and-elevation).
const (
	SessionTTL   = 12 * time.Hour
	ElevationTTL = 5 * time.Minute
)

const (
	tokenIssuer       = "btk"
	sessionAudience   = "btk-session"
	elevationAudience = "btk-elevation"
)

// Tokens signs and checks session and elevation JWTs (HS256) with the keys
// of a Keyring. The two kinds carry different audiences, so neither can
// ever pass as the other.
type Tokens struct {
	ring Keyring
	// secret is the server secret, which does not change when session keys
	// rotate: device tokens and the webhook sealing key derive from it.
	secret []byte
	now    func() time.Time
}

// NewTokens returns a signer with the single server secret (no key id).
func NewTokens(secret []byte, now func() time.Time) *Tokens {
	return &Tokens{ring: Keyring{Legacy: secret}, secret: secret, now: now}
}

// NewKeyringTokens returns a signer of sessions with the keys of ring, and
// of device tokens with the server secret.
func NewKeyringTokens(ring Keyring, secret []byte, now func() time.Time) *Tokens {
	return &Tokens{ring: ring, secret: secret, now: now}
}

type sessionClaims struct {
	jwt.RegisteredClaims
}

type elevationClaims struct {
	jwt.RegisteredClaims
	SessionID string `json:"sid"`
}

// SessionClaims are what a verified session token says.
type SessionClaims struct {
	AccountID string
	SessionID string
}

func (t *Tokens) sign(claims jwt.Claims) string {
	kid, secret := t.ring.signer()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(secret)
	if err != nil { // only for a key of the wrong type, which ours never is
		panic(err)
	}
	return s
}

func (t *Tokens) registered(audience, subject, id string, ttl time.Duration) (jwt.RegisteredClaims, time.Time) {
	now := t.now()
	exp := now.Add(ttl)
	return jwt.RegisteredClaims{
		Issuer:    tokenIssuer,
		Audience:  jwt.ClaimStrings{audience},
		Subject:   subject,
		ID:        id,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(exp),
	}, exp
}

// SessionToken signs a token for the session s.
func (t *Tokens) SessionToken(s *Session) string {
	rc, _ := t.registered(sessionAudience, s.AccountID, s.ID, 0)
	rc.ExpiresAt = jwt.NewNumericDate(s.ExpiresAt)
	return t.sign(sessionClaims{rc})
}

// ElevationToken signs a 5-minute elevation token bound to the account and session.
func (t *Tokens) ElevationToken(accountID, sessionID string) (string, time.Time) {
	rc, exp := t.registered(elevationAudience, accountID, uuid.NewString(), ElevationTTL)
	return t.sign(elevationClaims{rc, sessionID}), exp
}

func (t *Tokens) parse(token, audience string, claims jwt.Claims) error {
	_, err := jwt.ParseWithClaims(token, claims, t.key,
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(audience),
		jwt.WithIssuer(tokenIssuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(t.now),
	)
	return err
}

// key is the secret that verifies tok: the ring's key its kid names, or
// the legacy secret for a token without one.
func (t *Tokens) key(tok *jwt.Token) (any, error) {
	kid := ""
	if v, ok := tok.Header["kid"]; ok {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, errors.New("malformed key id")
		}
		kid = s
	}
	return t.ring.verifier(kid, t.now())
}

// ErrInvalidSession is the request-level failure for a bad bearer token.
var ErrInvalidSession = &Error{Code: CodeUnauthenticated, Message: "invalid or expired session", Reason: ReasonSessionInvalid}

// ParseSession verifies a session token.
func (t *Tokens) ParseSession(token string) (SessionClaims, error) {
	var c sessionClaims
	if err := t.parse(token, sessionAudience, &c); err != nil || c.Subject == "" || c.ID == "" {
		return SessionClaims{}, ErrInvalidSession
	}
	return SessionClaims{AccountID: c.Subject, SessionID: c.ID}, nil
}

// CheckElevation reports whether token is a valid elevation token for the
// account and session.
func (t *Tokens) CheckElevation(token, accountID, sessionID string) bool {
	var c elevationClaims
	if err := t.parse(token, elevationAudience, &c); err != nil {
		return false
	}
	return c.Subject == accountID && c.SessionID == sessionID
}
