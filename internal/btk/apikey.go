package btk

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"strings"
)

// Key format: btk_<8-char workspace prefix>_<32 random bytes, base64url, no padding>.
const (
	KeyPrefix          = "btk_"
	PublicKeyPrefix    = "bpk_"
	WorkspacePrefixLen = 8
	keyRandomBytes     = 32
	publicRandomBytes  = 16
	// DisplayPrefixLen is "btk_" plus the workspace prefix.
	DisplayPrefixLen = len(KeyPrefix) + WorkspacePrefixLen
	randomStart      = DisplayPrefixLen + 1
	// KeyLen is the exact length of every btk_ key (56).
	KeyLen  = randomStart + (keyRandomBytes*8+5)/6
	hintLen = 4
)

// NewKey draws a new plaintext key for the workspace and returns it with the
// fields of its record that derive from it. The plaintext must be shown once
// and then forgotten: only the hash is stored.
func NewKey(workspaceID string) (plaintext string, hash []byte, displayPrefix, hint string) {
	plaintext = newToken(KeyPrefix, workspaceID, keyRandomBytes)
	h := HashKey(plaintext)
	return plaintext, h[:], plaintext[:DisplayPrefixLen], plaintext[KeyLen-hintLen:]
}

// NewPublicClientKey draws a workspace's public client key (bpk_...).
func NewPublicClientKey(workspaceID string) string {
	return newToken(PublicKeyPrefix, workspaceID, publicRandomBytes)
}

func newToken(prefix, workspaceID string, n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails; see crypto/rand.Read
	return prefix + workspaceID[:WorkspacePrefixLen] + "_" + base64.RawURLEncoding.EncodeToString(b)
}

// HashKey is the SHA-256 of a plaintext key: the only form of it ever stored.
func HashKey(plaintext string) [sha256.Size]byte {
	return sha256.Sum256([]byte(plaintext))
}

// RedactKeys returns s (a request path, for a log line or an audit row)
// with the secret part of anything that looks like a btk_ key replaced by
// "…": "btk_" and up to 8 characters of the workspace prefix (a key's
// display prefix, which is not secret) stay. A key pasted into a URL is
// still a key, whether or not it is whole.
func RedactKeys(s string) string {
	i := strings.Index(s, KeyPrefix)
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		j := i + len(KeyPrefix)
		for n := 0; n < WorkspacePrefixLen && j < len(s) && KeyChar(s[j]) && s[j] != '_'; n++ {
			j++
		}
		b.WriteString(s[:j])
		k := j
		for k < len(s) && KeyChar(s[k]) {
			k++
		}
		if k > j {
			b.WriteString("…")
		}
		s = s[k:]
		i = strings.Index(s, KeyPrefix)
	}
	b.WriteString(s)
	return b.String()
}

// Redacted is a string a client controls (a request path, an operation
// name) as the value of a log attribute: it is written as RedactKeys of
// itself, and only when the line is. A client may paste a key anywhere, so
// such strings go to the log through it, never raw.
type Redacted string

// LogValue implements slog.LogValuer.
func (s Redacted) LogValue() slog.Value { return slog.StringValue(RedactKeys(string(s))) }

// KeyChar reports whether c may be part of a key: base64url and '_' (a
// byte next to a key that is one makes the match part of a longer token).
func KeyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// WellFormedKey reports whether s has the exact shape of a btk_ key. It reads
// fixed positions (the random part may itself contain '_'), so a malformed
// key is refused before any hashing or database work.
func WellFormedKey(s string) bool { return wellFormedKey(s) }

// WellFormedKeyBytes is WellFormedKey of bytes, without a conversion (the
// key scanner's strict match, docs/leaks.md).
func WellFormedKeyBytes(s []byte) bool { return wellFormedKey(s) }

func wellFormedKey[T string | []byte](s T) bool {
	if len(s) != KeyLen || string(s[:len(KeyPrefix)]) != KeyPrefix || s[DisplayPrefixLen] != '_' {
		return false
	}
	for i := len(KeyPrefix); i < DisplayPrefixLen; i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	for i := randomStart; i < KeyLen; i++ {
		if b64Values[s[i]] < 0 {
			return false
		}
	}
	// 43 characters carry 258 bits for 256: the last one's 2 low bits are zero
	// in every key we made.
	return b64Values[s[KeyLen-1]]&3 == 0
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// b64Values is b64Value of every byte: a table lookup per character of a
// presented key instead of a chain of branches that random characters
// mispredict (docs/design.md#budgets).
var b64Values = func() (t [256]int8) {
	for c := range t {
		t[c] = int8(b64Value(byte(c)))
	}
	return t
}()

// b64Value is the 6-bit value of a base64url character, or -1.
func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '-':
		return 62
	case c == '_':
		return 63
	}
	return -1
}
