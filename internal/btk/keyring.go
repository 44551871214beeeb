package btk

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// SigningKey is one session signing key of a keyring: its id (the JWT
// header's kid) and its HS256 secret.
type SigningKey struct {
	ID     string
	Secret []byte
}

// Keyring holds the session signing keys (docs/security.md#session-signing-keys). Keys[0] signs every new session and elevation token with
// its id as kid; every key of the ring verifies the tokens that name it,
// so a key that is no longer first keeps its sessions alive until they
// expire, and a key removed from the ring ends them. A token naming a kid
// that is not in the ring is refused.
//
// Legacy is the single secret of before (BTK_SECRET or the one generated in
// the database). It verifies only tokens without a kid, and only until
// LegacyUntil; zero LegacyUntil with a Legacy secret means for ever (the
// zero-configuration server, whose only key it is).
type Keyring struct {
	Keys        []SigningKey
	Legacy      []byte
	LegacyUntil time.Time
}

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// MinSecretLen is the least length of a signing secret, in bytes.
const MinSecretLen = 32

// ParseSessionKeys reads a list of signing keys, one `ID=SECRET` per line
// or separated by commas; blank lines and lines starting with # are
// skipped. The first key signs. IDs are 1-64 letters, digits, '.', '_' or
// '-', unique; secrets at least 32 bytes.
func ParseSessionKeys(text string) ([]SigningKey, error) {
	var keys []SigningKey
	seen := map[string]bool{}
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, secret, ok := strings.Cut(line, "=")
		id, secret = strings.TrimSpace(id), strings.TrimSpace(secret)
		if !ok {
			return nil, errors.New("want ID=SECRET for each key")
		}
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("key id %q: want 1-64 letters, digits, '.', '_' or '-'", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("key id %q given twice", id)
		}
		if len(secret) < MinSecretLen {
			return nil, fmt.Errorf("key %q: the secret must be at least %d bytes", id, MinSecretLen)
		}
		seen[id] = true
		keys = append(keys, SigningKey{ID: id, Secret: []byte(secret)})
	}
	return keys, nil
}

// signer is the key new tokens are signed with: the first of the ring, or
// the legacy secret without a kid.
func (r *Keyring) signer() (kid string, secret []byte) {
	if len(r.Keys) > 0 {
		return r.Keys[0].ID, r.Keys[0].Secret
	}
	return "", r.Legacy
}

// verifier is the secret that checks a token with header kid at now, or
// an error when none may.
func (r *Keyring) verifier(kid string, now time.Time) ([]byte, error) {
	if kid == "" {
		if len(r.Legacy) == 0 || (!r.LegacyUntil.IsZero() && !now.Before(r.LegacyUntil)) {
			return nil, errors.New("token without a key id")
		}
		return r.Legacy, nil
	}
	for _, k := range r.Keys {
		if k.ID == kid {
			return k.Secret, nil
		}
	}
	return nil, errors.New("unknown key id")
}
