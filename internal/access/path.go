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
	raw, ok := pathOf(raw)
	if !ok {
		return "", false
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
	dec, ok := unescape(raw)
	if !ok {
		return "", false
	}
	return removeDots(dec)
}

// MaxPathLen bounds the path the rules decide, in bytes: a longer one is
// refused where rules apply. nginx and Apache refuse request lines of
// about 8 KiB; without a bound, each reading of a 64 KiB path (Readings)
// would cost milliseconds, for refusals that count against no limit.
const MaxPathLen = 8 << 10

// pathOf is the path of a request target: without query or fragment, and
// the path of an absolute URI; false for anything else, and for a path
// longer than MaxPathLen.
func pathOf(raw string) (string, bool) {
	for i := 0; i < len(raw); i++ { // IndexAny(raw, "?#") builds its byte set on every call
		if raw[i] == '?' || raw[i] == '#' {
			raw = raw[:i]
			break
		}
	}
	if raw == "" || len(raw) > MaxPathLen {
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
	return raw, true
}

// unescape percent-decodes a path; false for a bad escape or a control
// character.
func unescape(p string) (string, bool) {
	dec, err := url.PathUnescape(p)
	if err != nil || strings.IndexFunc(dec, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", false
	}
	return dec, true
}

// Request is a method and a normalised path, as the rules decide them.
type Request struct {
	Method, Path string
	// IfMatched: the reading only names another method (upper case, or GET
	// for HEAD). It is refused where a rule matches and refuses it; where
	// none matches it decides nothing, so that a rule written for the method
	// as sent (methods: [HEAD]) is not overruled by the missing rule of
	// another.
	IfMatched bool
}

// Readings are the other ways servers read a request (docs/access.md#paths).
// Not every upstream reads a path as RFC 3986 does: nginx, Apache and
// Tomcat merge "//" into "/" before they remove dot segments (to them
// "/a//../b" is "/b", to the RFC "/a/b"); Tomcat, Jetty and Spring drop a
// segment's ";parameters" ("/a/..;/b" is "/b"); IIS and WHATWG URL parsers
// take "\" for "/"; some servers and frameworks percent-decode twice;
// Django upper-cases the method; most frameworks answer HEAD with the GET
// handler; Go's server keeps a "#" in the path. A request the rules see as
// "/public/…" must not reach an upstream that serves "/admin/…", so the key
// check decides every reading and refuses the request if any is refused: a
// reading can only refuse more, never allow more.
//
// Readings returns the readings of (method, raw path) other than
// (method, Normalize(raw)), or nil when there are none; it allocates only
// for a path with "%", ";", "\", "#" or "//", a method not in upper case,
// or HEAD. It reports false when a reading cannot be normalised (the
// request is then refused, as for Normalize).
func Readings(method, raw string) ([]Request, bool) {
	upper := strings.ToUpper(method) // no allocation when already upper case
	plain := true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '?' {
			break
		}
		if c == '#' || c == '%' || c == ';' || c == '\\' || c == '/' && i > 0 && raw[i-1] == '/' {
			plain = false
			break
		}
	}
	if plain && upper == method && method != "HEAD" {
		return nil, true
	}
	p, ok := pathOf(raw)
	if !ok {
		return nil, false
	}
	dec, ok := unescape(p)
	if !ok {
		return nil, false
	}
	primary, ok := removeDots(dec)
	if !ok {
		return nil, false
	}
	paths := []string{primary}
	bases := []string{dec}
	// A client sends no fragment: a "#" in a request line ("/a#/../admin")
	// is a character of the path to servers that do not cut there (Go's
	// own). In an absolute URI, the path starts after the authority.
	if q := strings.IndexByte(raw, '?'); q >= 0 {
		raw = raw[:q]
	}
	if strings.IndexByte(raw, '#') >= 0 {
		if raw[0] != '/' {
			auth := raw[strings.Index(raw, "//")+2:] // pathOf checked the scheme
			raw = "/"
			if k := strings.IndexByte(auth, '/'); k >= 0 {
				raw = auth[k:]
			}
		}
		if len(raw) > MaxPathLen {
			return nil, false
		}
		whole, ok := unescape(raw)
		if !ok {
			return nil, false
		}
		bases = append(bases, whole)
	}
	// A path still holding escapes once decoded ("%252e%252e") is what a
	// server that decodes twice reads as "..". One that does not decode
	// again is a path with a literal "%" ("100%25" is "100%"); one that
	// decodes to a control character is refused, as Normalize refuses it.
	if strings.IndexByte(dec, '%') >= 0 {
		if twice, err := url.PathUnescape(dec); err == nil {
			if strings.IndexFunc(twice, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				return nil, false
			}
			bases = append(bases, twice)
		}
	}
	for _, base := range bases {
		// Every combination of the three readings, less those that change
		// nothing ("\" or ";" absent).
		skip := 0
		if strings.IndexByte(base, '\\') < 0 {
			skip |= 1
		}
		if strings.IndexByte(base, ';') < 0 {
			skip |= 2
		}
		for mask := 0; mask < 8; mask++ {
			if mask&skip != 0 {
				continue
			}
			q := base
			if mask&1 != 0 {
				q = strings.ReplaceAll(q, `\`, "/")
			}
			if mask&2 != 0 {
				q = withoutParams(q)
			}
			if mask&4 != 0 {
				q = mergeSlashes(q)
			}
			if q == dec {
				continue
			}
			n, ok := removeDots(q)
			if !ok {
				return nil, false
			}
			if !contains(paths, n) {
				paths = append(paths, n)
			}
		}
	}
	methods := []string{method}
	if upper != method {
		methods = append(methods, upper)
	}
	if upper == "HEAD" { // served by the GET handler (Go's ServeMux, Express, Rails, Django)
		methods = append(methods, "GET")
	}
	var out []Request
	for i, path := range paths {
		for j, m := range methods {
			if i == 0 && j == 0 {
				continue // the request itself
			}
			out = append(out, Request{Method: m, Path: path, IfMatched: j > 0})
		}
	}
	return out, true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// withoutParams drops each segment's ";parameters" ("/a;v=1/b;x" is "/a/b").
func withoutParams(p string) string {
	if strings.IndexByte(p, ';') < 0 {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ';'); j >= 0 {
			segs[i] = s[:j]
		}
	}
	return strings.Join(segs, "/")
}

// mergeSlashes turns every run of "/" into one.
func mergeSlashes(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
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
