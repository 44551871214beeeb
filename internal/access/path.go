package access

import (
	"bytes"
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

// unescapeLenient percent-decodes every valid escape of p and leaves the
// rest as they are; false for a control character.
func unescapeLenient(p string) (string, bool) {
	var b []byte
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) && ishex(p[i+1]) && ishex(p[i+2]) {
			if b == nil {
				b = append(make([]byte, 0, len(p)), p[:i]...)
			}
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
		} else if b == nil {
			continue
		}
		b = append(b, c)
	}
	if b != nil {
		p = string(b)
	}
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", false
	}
	return p, true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
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
// take "\" for "/"; IIS and Java containers on Windows drop a segment's
// trailing dots and spaces ("/admin./x" is "/admin/x"); some servers and
// frameworks percent-decode twice; servers that decode the path and parse
// it again cut it at a decoded "?" or "#" ("/admin%3F.css" is "/admin");
// Django upper-cases the method; most frameworks answer HEAD with the GET
// handler; Go's server keeps a "#" in the path. A request the rules see as
// "/public/…" must not reach an upstream that serves "/admin/…", so the key
// check decides every reading and refuses the request if any is refused: a
// reading can only refuse more, never allow more.
//
// Readings returns the readings of (method, raw path) other than
// (method, Normalize(raw)), or nil when there are none; it allocates only
// for a path with "%", ";", "\", "#", "//" or a segment (other than "."
// and "..") that ends with a dot or a space, a method not in upper case,
// HEAD, or overrides. It reports false when a reading cannot be normalised
// or a method is not an HTTP token (the request is then refused, as for
// Normalize).
//
// overrides are the values of the request's method-override headers
// (X-HTTP-Method-Override and the like): Rails, Express's
// method-override, ASP.NET Core, Symfony and Laravel serve a POST that
// carries one as the method it names, so each is one more method reading,
// in upper case, decided in full as the request's own method is: a rule
// that allows the method sent does not let a DELETE through
// (docs/access.md#method-override-headers).
func Readings(method, raw string, overrides ...string) ([]Request, bool) {
	if !ValidToken(method) {
		return nil, false
	}
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
		if (c == '.' || c == ' ') && (i+1 == len(raw) || raw[i+1] == '/' || raw[i+1] == '?') && !dotSegment(raw[:i+1]) {
			plain = false
			break
		}
	}
	if plain && upper == method && method != "HEAD" && len(overrides) == 0 {
		return nil, true
	}
	if len(overrides) > MaxMethodOverrides {
		// Each is decided against every reading of the path, and a refused
		// request counts against no limit: thousands of "_method" values in
		// a 64 KiB query cost 34 ms a request. No client sends more than one.
		return nil, false
	}
	for _, o := range overrides {
		// An empty value overrides nothing, to any framework; "DELETE, GET"
		// is DELETE to Express (the first of a list): what is no method
		// is refused, not guessed at.
		if o != "" && !ValidToken(o) {
			return nil, false
		}
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
	// A decoded "?" or "#" ("/admin%3F.css") is where a server that
	// decodes the path and then parses it again cuts off a query or
	// fragment: to it, that is "/admin".
	bases = withCuts(bases)
	// A path still holding escapes once decoded ("%252e%252e") is what a
	// server that decodes twice reads as "..". The second decoding is
	// lenient, as PHP's rawurldecode and Python's unquote are: an escape
	// that is not one ("%zz", a last "%") stays as it is and the others are
	// decoded all the same, so "/%2561dmin/x%25" is "/admin/x%" to them.
	// One that decodes to a control character is refused, as Normalize
	// refuses it. The "#" and cut readings are decoded twice too, and what
	// is decoded twice is cut again ("%253F").
	for _, base := range bases {
		if strings.IndexByte(base, '%') < 0 {
			continue
		}
		twice, ok := unescapeLenient(base)
		if !ok {
			return nil, false
		}
		if !contains(bases, twice) {
			bases = append(bases, twice)
		}
	}
	bases = withCuts(bases)
	var qs []string // the spellings of one base already decided
	for _, base := range bases {
		// Every combination of the three readings, less those that change
		// nothing ("\" or ";" absent) or give a spelling already decided
		// (no "//" to merge).
		skip := 0
		if strings.IndexByte(base, '\\') < 0 {
			skip |= 1
		}
		if strings.IndexByte(base, ';') < 0 {
			skip |= 2
		}
		// Each combination also without its segments' trailing dots and
		// spaces, after dot segments are removed, as Windows does: ".. "
		// and "..." are names there, not "..", and never climb.
		trim := trailingDotSpace(base)
		qs = qs[:0]
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
			if contains(qs, q) {
				continue
			}
			qs = append(qs, q)
			n := primary
			if q != dec {
				if n, ok = removeDots(q); !ok {
					return nil, false
				}
				if !contains(paths, n) {
					paths = append(paths, n)
				}
			}
			if trim {
				if n = withoutTrailingDots(n); !contains(paths, n) {
					paths = append(paths, n)
				}
			}
		}
	}
	methods := []Request{{Method: method}} // Path unused
	methods = addMethod(methods, upper, true)
	if upper == "HEAD" { // served by the GET handler (Go's ServeMux, Express, Rails, Django)
		methods = addMethod(methods, "GET", true)
	}
	for _, o := range overrides {
		if o == "" {
			continue
		}
		o = strings.ToUpper(o)
		methods = addMethod(methods, o, false)
		if o == "HEAD" {
			methods = addMethod(methods, "GET", true)
		}
	}
	var out []Request
	for i, path := range paths {
		for j, m := range methods {
			if i == 0 && j == 0 {
				continue // the request itself
			}
			out = append(out, Request{Method: m.Method, Path: path, IfMatched: m.IfMatched})
		}
	}
	return out, true
}

// addMethod adds the method reading m to methods, once: a method read in
// full (an override) stays so when it is also another's spelling.
func addMethod(methods []Request, m string, ifMatched bool) []Request {
	for i := range methods {
		if methods[i].Method == m {
			methods[i].IfMatched = methods[i].IfMatched && ifMatched
			return methods
		}
	}
	return append(methods, Request{Method: m, IfMatched: ifMatched})
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
// One pass over the bytes: a hostile 8 KiB path has thousands of segments,
// and Readings makes several spellings of it.
func withoutParams(p string) string {
	if strings.IndexByte(p, ';') < 0 {
		return p
	}
	b := make([]byte, 0, len(p))
	params := false
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '/':
			params = false
		case ';':
			params = true
		}
		if !params {
			b = append(b, p[i])
		}
	}
	return string(b)
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
// root is refused rather than dropped. It works on the bytes, not on a
// slice of segments, for the reason withoutParams does.
func removeDots(p string) (string, bool) {
	b := make([]byte, 0, len(p))
	for rest := p[1:]; ; {
		seg, next, more := rest, "", false
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, next, more = rest[:i], rest[i+1:], true
		}
		switch seg {
		case ".":
		case "..":
			if len(b) == 0 {
				return "", false
			}
			b = b[:bytes.LastIndexByte(b, '/')]
		default:
			b = append(append(b, '/'), seg...)
		}
		if !more {
			if seg == "." || seg == ".." {
				b = append(b, '/') // "/a/." is "/a/"
			}
			break
		}
		rest = next
	}
	if len(b) == 0 {
		return "/", true
	}
	return string(b), true
}

// dotSegment reports whether p ends with the segment "." or "..", which
// removing dot segments takes care of.
func dotSegment(p string) bool {
	return strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")
}

// withCuts adds to bases each one cut at its first "?" or "#", where it
// has one and the cut is not already there.
func withCuts(bases []string) []string {
	for _, base := range bases {
		for i := 0; i < len(base); i++ {
			if base[i] == '?' || base[i] == '#' {
				if cut := base[:i]; !contains(bases, cut) {
					bases = append(bases, cut)
				}
				break
			}
		}
	}
	return bases
}

// trailingDotSpace reports whether a segment of p may end with a dot or a
// space: one does before "/", "\" or ";" (which other readings take for
// the end of a segment), or at the end of p.
func trailingDotSpace(p string) bool {
	for i := 1; i < len(p); i++ {
		if c := p[i]; (c == '/' || c == '\\' || c == ';') && (p[i-1] == '.' || p[i-1] == ' ') {
			return true
		}
	}
	return p != "" && (p[len(p)-1] == '.' || p[len(p)-1] == ' ')
}

// withoutTrailingDots drops the trailing dots and spaces of each segment
// of a normalised path, as Windows does to a file name (IIS, and Java
// containers on Windows, serve "/admin./x" and "/admin%20/x" as
// "/admin/x"). A segment left empty ("...", ". ") is dropped, as Windows
// collapses the separators around it, unless it is the last.
func withoutTrailingDots(p string) string {
	if !trailingDotSpace(p) {
		return p
	}
	b := make([]byte, 0, len(p))
	for rest := p[1:]; ; {
		seg, next, more := rest, "", false
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, next, more = rest[:i], rest[i+1:], true
		}
		if t := strings.TrimRight(seg, ". "); t != "" || seg == "" || !more {
			b = append(append(b, '/'), t...)
		}
		if !more {
			return string(b)
		}
		rest = next
	}
}
