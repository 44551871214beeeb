package btk

import (
	"testing"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain, café →":           "plain, café →",
		"tab\tand\nnewline":       "tab\tand\nnewline",
		"uaX\u202egnp.exe":        `uaX\u202egnp.exe`,
		"\u2066isolate\u2069":     `\u2066isolate\u2069`,
		"zero\u200bwidth\ufeff":   `zero\u200bwidth\ufeff`,
		"line\u2028sep\r":         `line\u2028sep\r`,
		"esc\x1b[2J del\x7f":      `esc\x1b[2J del\x7f`,
		"c1\u009b bare \x9b":      `c1\u009b bare \x9b`,
		"vs\ufe0f tag\U000e0041":  `vs\ufe0f tag\U000e0041`,
		"kept \ufffd (U+FFFD)":    "kept \ufffd (U+FFFD)",
		"cut \xe2\x80 at the end": `cut \xe2\x80 at the end`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	// The fast check agrees with the escaping on every code point.
	for r := rune(0); r <= utf8.MaxRune; r++ {
		s := "a" + string(r)
		if printableAlready(s) != (Printable(s) == s) && utf8.ValidRune(r) {
			t.Errorf("%U: the fast check says %v", r, printableAlready(s))
		}
	}
}
