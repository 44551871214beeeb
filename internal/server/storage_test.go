package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// secretSet collects every secret a test has seen, each with a description.
type secretSet struct {
	names  []string
	values []string
}

func (s *secretSet) add(name, value string) {
	if value == "" {
		panic("empty secret " + name)
	}
	s.names = append(s.names, name)
	s.values = append(s.values, value)
}

// addKey adds a plaintext key, its random part alone, and every run of 8
// characters of the random part: only the hint (its last 4 characters) may
// be stored, so no longer piece of it may appear anywhere.
func (s *secretSet) addKey(name, plaintext string) {
	s.add(name, plaintext)
	random := plaintext[len("btk_12345678_"):]
	s.add(name+" (random part)", random)
	for i := 0; i+8 <= len(random); i++ {
		s.add(fmt.Sprintf("%s (random part, characters %d-%d)", name, i, i+8), random[i:i+8])
	}
}

// addToken adds a JWT and its signature alone.
func (s *secretSet) addToken(name, token string) {
	s.add(name, token)
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		panic(name + " is not a JWT: " + token)
	}
	s.add(name+" (signature)", parts[2])
}

// findIn reports every secret data contains.
func (s *secretSet) findIn(t *testing.T, where string, data []byte) {
	t.Helper()
	for i, v := range s.values {
		if bytes.Contains(data, []byte(v)) {
			t.Errorf("%s contains the %s", where, s.names[i])
		}
	}
}

// storageScenario exercises every path that handles a secret: login, elevate,
// create, rotate, revoke, createAccount, impersonate, authenticated requests
// with every credential header, and the failures of each.
func storageScenario(t *testing.T, e *env) (secrets *secretSet, keys []newKey) {
	secrets = &secretSet{}
	secrets.add("bootstrap password", adminPassword)
	owner := e.admin()
	secrets.addToken("owner session token", owner.Bearer)
	elevated := e.elevated(owner, adminPassword)
	secrets.addToken("elevation token", elevated.Elevation)

	a := e.createKey(owner, "a")
	secrets.addKey("created key", a.Plaintext)
	var rot struct {
		RotateApiKey struct {
			PlaintextKey string
			ApiKey       struct{ ID string }
		}
	}
	e.must(elevated, `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey apiKey{id}}}`, map[string]any{"id": a.ID}, &rot)
	rotated := newKey{ID: rot.RotateApiKey.ApiKey.ID, Plaintext: rot.RotateApiKey.PlaintextKey}
	secrets.addKey("rotated key", rotated.Plaintext)
	b := e.createKey(owner, "b")
	secrets.addKey("revoked key", b.Plaintext)
	e.must(owner, `mutation($id:ID!){revokeApiKey(id:$id){id}}`, map[string]any{"id": b.ID}, &struct{}{})

	const userPassword = "user-password-Zq81xW"
	userID := e.createAccount(owner, "user@example.com", userPassword, false)
	secrets.add("account password", userPassword)
	e.setMember(owner, e.adminWS, userID, "ADMIN")
	user := cred{Bearer: e.login("user@example.com", userPassword, "")}
	secrets.addToken("user session token", user.Bearer)
	ws := e.createWorkspace(owner, "Other", "CLOUD_PRO")
	imp := cred{Bearer: e.impersonate(owner, ws)}
	secrets.addToken("impersonation token", imp.Bearer)

	// Authenticated requests with every header.
	for range 5 {
		for _, k := range []newKey{rotated} {
			if r := e.do(cred{Key: k.Plaintext, Header: map[string]string{"X-Tenant-Id": ws}}, probe, nil); r.Status != http.StatusOK {
				t.Fatalf("probe: HTTP %d", r.Status)
			}
		}
		e.must(elevated, `{me{id} apiKeys{nodes{id}}}`, nil, &struct{}{})
		e.must(user, `{me{id} apiKeys{nodes{id}}}`, nil, &struct{}{})
		e.must(imp, probe, nil, &struct{}{})
	}

	// Failures: wrong passwords, bad and revoked keys, bad tokens.
	const wrongPassword = "wrong-password-Kp2m"
	secrets.add("wrong password", wrongPassword)
	if r := e.do(cred{}, `mutation($p:String!){login(email:"admin@example.com",password:$p){accessToken}}`, map[string]any{"p": wrongPassword}); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("login with a wrong password: %q", r.Code())
	}
	if r := e.do(owner, `mutation($p:String!){elevate(password:$p){token}}`, map[string]any{"p": wrongPassword}); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("elevate with a wrong password: %q", r.Code())
	}
	const shortPassword = "short7!"
	secrets.add("refused password", shortPassword)
	if r := e.do(owner, `mutation($p:String!){createAccount(input:{email:"x@example.com",password:$p}){id}}`, map[string]any{"p": shortPassword}); r.Code() != "BAD_USER_INPUT" {
		t.Fatalf("createAccount with a short password: %q", r.Code())
	}
	unknown := a.Plaintext[:13] + "Zz9-" + a.Plaintext[17:]
	secrets.addKey("unknown key", unknown)
	for _, c := range []cred{
		{Key: a.Plaintext},                      // replaced by rotation
		{Key: b.Plaintext},                      // revoked
		{Key: unknown},                          // well-formed, unknown
		{Key: rotated.Plaintext[:50]},           // malformed
		{Bearer: owner.Bearer + "x"},            // tampered token
		{Bearer: elevated.Elevation},            // elevation token as a session
		{Bearer: "not-a-jwt", Key: a.Plaintext}, // bad bearer with a key
	} {
		if r := e.do(c, probe, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("%+v: HTTP %d, want 401", c, r.Status)
		}
	}
	if r := e.do(cred{Bearer: owner.Bearer, Elevation: owner.Bearer}, `mutation($id:ID!){rotateApiKey(id:$id){plaintextKey}}`, map[string]any{"id": rotated.ID}); r.Code() != "ELEVATION_REQUIRED" {
		t.Fatalf("rotate with a session token as elevation: %q", r.Code())
	}
	e.flush()
	return secrets, []newKey{a, rotated, b}
}

// docs/security.md#storage-logs-and-revocation: no plaintext key, password or token is ever
// written to the database, its WAL or the server log.
func TestNoSecretsStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	secrets, keys := storageScenario(t, e)
	t.Run("database files", func(t *testing.T) { checkDatabaseFiles(t, e, secrets, keys) })
	t.Run("server log", func(t *testing.T) { checkServerLog(t, e, secrets) })
}

// checkDatabaseFiles: no secret is in the database file, its -wal or its
// -shm; the SHA-256 of each key is, and finds the key.
func checkDatabaseFiles(t *testing.T, e *env, secrets *secretSet, keys []newKey) {

	files := map[string][]byte{}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		data, err := os.ReadFile(e.dbPath + suffix)
		if err != nil {
			t.Fatalf("the database file%s should exist while the server is open (WAL mode): %v", suffix, err)
		}
		if len(data) == 0 {
			t.Fatalf("database file%s is empty", suffix)
		}
		files["database file"+suffix] = data
		secrets.findIn(t, "database file"+suffix, data)
	}
	both := append(append([]byte{}, files["database file"]...), files["database file-wal"]...)
	for _, k := range keys {
		sum := sha256.Sum256([]byte(k.Plaintext))
		if !bytes.Contains(both, sum[:]) && !bytes.Contains(both, []byte(hex.EncodeToString(sum[:]))) {
			t.Errorf("the SHA-256 of key %s is not in the database files", k.ID)
		}
		// The store finds the key by the SHA-256 of its plaintext.
		err := e.db.Read(context.Background(), func(tx btk.Tx) error {
			got, err := tx.APIKeyByHash(context.Background(), sum[:])
			if err == nil && got.ID != k.ID {
				t.Errorf("key by SHA-256 of %s's plaintext is %s", k.ID, got.ID)
			}
			return err
		})
		if err != nil {
			t.Errorf("key %s by the SHA-256 of its plaintext: %v", k.ID, err)
		}
	}
}

// checkServerLog: the log never contains a key, password, token or the value
// of a credential header, also when the credential is refused.
func checkServerLog(t *testing.T, e *env, secrets *secretSet) {
	logs := e.logText()
	if !strings.Contains(logs, `route="POST /graphql"`) {
		t.Fatalf("the server logged no request; the test would prove nothing:\n%s", logs)
	}
	secrets.findIn(t, "the server log", []byte(logs))
}
