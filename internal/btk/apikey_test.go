package btk

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

const testWorkspace = "0f3a9c1e-8b7d-4e2f-9a6b-5c4d3e2f1a0b"

func TestNewKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		plain, hash, display, hint := NewKey(testWorkspace)
		if len(plain) != KeyLen || KeyLen != 56 {
			t.Fatalf("len %d, want 56", len(plain))
		}
		if !strings.HasPrefix(plain, "btk_0f3a9c1e_") || display != "btk_0f3a9c1e" || len(display) != 12 {
			t.Fatalf("prefix: %q display %q", plain, display)
		}
		raw, err := base64.RawURLEncoding.DecodeString(plain[13:])
		if err != nil || len(raw) != 32 {
			t.Fatalf("random part %q: %v (%d bytes)", plain[13:], err, len(raw))
		}
		if hint != plain[52:] {
			t.Fatalf("hint %q of %q", hint, plain)
		}
		if want := sha256.Sum256([]byte(plain)); string(hash) != string(want[:]) {
			t.Fatal("hash is not the SHA-256 of the plaintext")
		}
		if !WellFormedKey(plain) {
			t.Fatalf("own key %q refused", plain)
		}
		if seen[plain] {
			t.Fatal("duplicate key")
		}
		seen[plain] = true
	}
}

func TestWellFormedKey(t *testing.T) {
	good, _, _, _ := NewKey(testWorkspace)
	// A key whose random part contains '_' is still parsed by position.
	underscore := good[:13] + "_" + good[14:]
	last := func(c byte) string { return good[:55] + string(c) }
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"good", good, true},
		{"underscore in random part", underscore, true},
		{"empty", "", false},
		{"public client key", NewPublicClientKey(testWorkspace), false},
		{"truncated", good[:55], false},
		{"too long", good + "A", false},
		{"wrong prefix", "BTK_" + good[4:], false},
		{"upper-case workspace prefix", good[:4] + "0F3A9C1E" + good[12:], false},
		{"missing separator", good[:12] + "-" + good[13:], false},
		{"padding", good[:55] + "=", false},
		{"non-zero trailing bits", last('B'), false},
		{"zero trailing bits", last('A'), true},
		{"space", good[:30] + " " + good[31:], false},
		{"non-ASCII", good[:30] + "é" + good[32:], false},
	}
	for _, tc := range tests {
		if got := WellFormedKey(tc.key); got != tc.want {
			t.Errorf("%s: WellFormedKey(%q) = %v, want %v", tc.name, tc.key, got, tc.want)
		}
	}
}

func FuzzWellFormedKey(f *testing.F) {
	good, _, _, _ := NewKey(testWorkspace)
	f.Add(good)
	f.Add("btk_")
	f.Fuzz(func(t *testing.T, s string) {
		if !WellFormedKey(s) {
			return
		}
		// Anything accepted has the exact shape of a key we could have made.
		raw, err := base64.RawURLEncoding.Strict().DecodeString(s[13:])
		if len(s) != KeyLen || err != nil || len(raw) != 32 || s[:4] != "btk_" {
			t.Fatalf("accepted malformed key %q", s)
		}
	})
}

func TestPublicClientKeyFormat(t *testing.T) {
	k := NewPublicClientKey(testWorkspace)
	if !strings.HasPrefix(k, "bpk_0f3a9c1e_") || len(k) != 13+22 {
		t.Fatalf("public client key %q", k)
	}
}

func BenchmarkAuthenticateParseHash(b *testing.B) {
	good, _, _, _ := NewKey(testWorkspace)
	for b.Loop() {
		if !WellFormedKey(good) {
			b.Fatal("refused")
		}
		HashKey(good)
	}
}

// A key in a request path never reaches a log line or an audit row whole:
// its secret part is cut, whole or partial, wherever it sits.
func TestRedactKeys(t *testing.T) {
	key, _, display, _ := NewKey("0123456789abcdef")
	for _, c := range []struct{ in, want string }{
		{"/healthz", "/healthz"},
		{"/" + key, "/" + display + "…"},
		{"/a/" + key + "/b?x", "/a/" + display + "…/b?x"},
		{"/" + key + "/" + key, "/" + display + "…/" + display + "…"},
		{"/" + key[:20], "/" + display + "…"},
		{"/btk_", "/btk_"},
		{"/btk_ab", "/btk_ab"},
		{"/btk_/secret", "/btk_/secret"},
		{"/xbtk_0123456_secretpart", "/xbtk_0123456…"},
	} {
		if got := RedactKeys(c.in); got != c.want {
			t.Errorf("RedactKeys(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(RedactKeys(c.in), key[DisplayPrefixLen:]) {
			t.Errorf("RedactKeys(%q) keeps the secret", c.in)
		}
	}
}
