package btk_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/store/sqlite"
)

// keyringEnv is one database and a clock that services are opened on, as
// successive starts of btk serve with different keys.
type keyringEnv struct {
	t   *testing.T
	db  *sqlite.DB
	now time.Time
}

func newKeyringEnv(t *testing.T) *keyringEnv {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "btk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &keyringEnv{t: t, db: db, now: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
}

// start opens a service with secret and keys (as BTK_SECRET and
// BTK_SESSION_KEYS) on the environment's database.
func (e *keyringEnv) start(secret string, keys string) *btk.Service {
	e.t.Helper()
	ring, err := btk.ParseSessionKeys(keys)
	if err != nil {
		e.t.Fatal(err)
	}
	svc, err := btk.NewService(context.Background(), e.db, []byte(secret), btk.Config{
		Now: func() time.Time { return e.now }, SessionKeys: ring,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := svc.Bootstrap(context.Background(), "admin@example.com", "correct-horse-battery-staple"); err != nil {
		e.t.Fatal(err)
	}
	return svc
}

func (e *keyringEnv) login(svc *btk.Service) string {
	e.t.Helper()
	info, err := svc.Login(context.Background(), "admin@example.com", "correct-horse-battery-staple", "")
	if err != nil {
		e.t.Fatal(err)
	}
	return info.Token
}

func accepts(svc *btk.Service, token string) bool {
	_, err := svc.ResolveSession(context.Background(), token)
	return err == nil
}

func kid(t *testing.T, token string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := tok.Header["kid"].(string)
	return s
}

var (
	keyA = "a=" + strings.Repeat("A", 32)
	keyB = "b=" + strings.Repeat("B", 32)
)

// Rotating the signing key logs no one out: the new key signs, the one
// before still verifies its sessions until the operator removes it, which
// ends them.
func TestSessionKeyRotation(t *testing.T) {
	e := newKeyringEnv(t)
	svcA := e.start("", keyA)
	tokA := e.login(svcA)
	if kid(t, tokA) != "a" {
		t.Fatalf("kid %q, want a", kid(t, tokA))
	}

	svcBA := e.start("", keyB+"\n"+keyA) // rotated: b signs, a verifies
	if !accepts(svcBA, tokA) {
		t.Fatal("a session signed with the previous key was refused after the rotation")
	}
	tokB := e.login(svcBA)
	if kid(t, tokB) != "b" || !accepts(svcBA, tokB) {
		t.Fatalf("new session: kid %q", kid(t, tokB))
	}

	svcB := e.start("", keyB) // a removed
	if accepts(svcB, tokA) {
		t.Error("a session of a removed key was accepted")
	}
	if !accepts(svcB, tokB) {
		t.Error("a session of the current key was refused")
	}
}

// A token naming a key id the ring does not hold is refused, even when its
// signature would verify under a key the ring has under another id.
func TestSessionKeyUnknownKid(t *testing.T) {
	e := newKeyringEnv(t)
	svc := e.start("", keyA)
	tok := e.login(svc)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		t.Fatal(err)
	}
	for _, header := range []any{"zz", "", 7} {
		forged := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		forged.Header["kid"] = header
		s, err := forged.SignedString([]byte(strings.Repeat("A", 32)))
		if err != nil {
			t.Fatal(err)
		}
		if accepts(svc, s) {
			t.Errorf("kid %v accepted", header)
		}
	}
	// Without a kid, on a fresh database (no secret of before): refused.
	forged := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	s, _ := forged.SignedString([]byte(strings.Repeat("A", 32)))
	if accepts(svc, s) {
		t.Error("a token without kid was accepted by a server that never had a single secret")
	}
}

// The zero-configuration server (secret generated in the database) moves to
// session keys without logging anyone out: its sessions (no kid) are
// accepted for one session lifetime after the first start with keys, and
// never after, even if someone with a backup signs new ones.
func TestSessionKeysMigrationFromStoredSecret(t *testing.T) {
	e := newKeyringEnv(t)
	old := e.start("", "") // the default: the secret in the database
	tokOld := e.login(old)
	if kid(t, tokOld) != "" {
		t.Fatalf("the single secret signs with kid %q", kid(t, tokOld))
	}
	e.now = e.now.Add(time.Hour)
	keyed := e.start("", keyA)
	if !accepts(keyed, tokOld) {
		t.Fatal("a session of the stored secret was refused right after moving to session keys")
	}
	e.now = e.now.Add(btk.SessionTTL - time.Minute)
	mintedLater := e.login(old) // as anyone holding the old secret could
	e.now = e.now.Add(2 * time.Minute)
	keyed = e.start("", keyA)
	if accepts(keyed, mintedLater) {
		t.Error("the secret of before still verifies a session lifetime after the move to session keys")
	}
	if tok := e.login(keyed); kid(t, tok) != "a" || !accepts(keyed, tok) {
		t.Error("the keyed server does not sign with its key")
	}
}

// BTK_SECRET of before verifies its tokens as the stored secret does.
func TestSessionKeysMigrationFromExplicitSecret(t *testing.T) {
	e := newKeyringEnv(t)
	secret := strings.Repeat("S", 32)
	tok := e.login(e.start(secret, ""))
	if !accepts(e.start(secret, keyA), tok) {
		t.Error("a session signed with BTK_SECRET was refused after moving to session keys")
	}
}

func TestParseSessionKeys(t *testing.T) {
	good := "# current first\n" + keyB + "\n\n" + keyA + "\n"
	keys, err := btk.ParseSessionKeys(good)
	if err != nil || len(keys) != 2 || keys[0].ID != "b" || keys[1].ID != "a" {
		t.Fatalf("%v %v", keys, err)
	}
	if keys, err := btk.ParseSessionKeys(keyB + "," + keyA); err != nil || len(keys) != 2 {
		t.Fatalf("comma-separated: %v %v", keys, err)
	}
	for _, bad := range []string{"a", "a=short", keyA + "\n" + keyA, "bad id=" + strings.Repeat("x", 32)} {
		if _, err := btk.ParseSessionKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
