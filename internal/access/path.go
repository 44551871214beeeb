package access

import (
	"net/url"
	"strings"
)

// Normalize returns the path rules are matched against: percent-decoded,
// then with dot segments removed (RFC 3986 §5.2.4). A query or fragment is
// cut off; an absolute URI gives its path. It reports false for what cannot
// be normalised: an empty or relative path, a bad percent escape, a control
// character, or dot segments that climb above the root. Such a request is
// refused (docs/access.md#paths). A path that needs no change is returned
// without allocating.
func Normalize(raw string) (string, bool) {
	for i := 0; i < len(raw); i++ { // IndexAny(raw, "?#") builds its byte set on every call
		if raw[i] == '?' || raw[i] == '#' {
			raw = raw[:i]
			break
		}
	}
	if raw == "" {
		return "", false
	}
	if raw[0] != '/' {
		if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
			return "", false
		}
		u, err := url.Parse(raw)
		if err != nil {
			return "", false
		}
		raw = u.EscapedPath()
		if raw == "" {
			raw = "/"
		}
	}
	clean := true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' || c < 0x20 || c == 0x7f {
			clean = false
			break
		}
		if c == '.' && raw[i-1] == '/' && (i+1 == len(raw) || raw[i+1] == '/' || raw[i+1] == '.' && (i+2 == len(raw) || raw[i+2] == '/')) {
			clean = false
			break
		}
	}
	if clean {
		return raw, true
	}
	dec, err := url.PathUnescape(raw)
	if err != nil || strings.IndexFunc(dec, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", false
	}
	return removeDots(dec)
}

// removeDots is RFC 3986 §5.2.4 on an absolute path, except that ".." at the
// root is refused rather than dropped.
func removeDots(p string) (string, bool) {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/"), true
}
