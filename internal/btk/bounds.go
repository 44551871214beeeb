package btk

import "unicode/utf8"

// MaxClientString bounds a string the client chose (user agent, address)
// before it is stored: a request may carry a megabyte of User-Agent, an
// audit row keeps 256 bytes of it (docs/security.md).
const MaxClientString = 256

// ClientString is s cut to MaxClientString bytes at a character boundary.
func ClientString(s string) string {
	if len(s) <= MaxClientString {
		return s
	}
	n := MaxClientString
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
