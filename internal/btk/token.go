package btk

import (
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

// Tokens signs and checks session and elevation JWTs (HS256). The two kinds
// carry different audiences, so neither can ever pass as the other.
type Tokens struct {
	secret []byte
	now    func() time.Time
}

// NewTokens returns a signer with the server secret.
func NewTokens(secret []byte, now func() time.Time) *Tokens {
	return &Tokens{secret: secret, now: now}
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
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(t.secret)
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
	_, err := jwt.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return t.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(audience),
		jwt.WithIssuer(tokenIssuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(t.now),
	)
	return err
}

// ErrInvalidSession is the request-level failure for a bad bearer token.
var ErrInvalidSession = &Error{CodeUnauthenticated, "invalid or expired session"}

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
