package access

import "strings"

// Method overrides (docs/access.md#method-override-headers): Rails,
// Express's method-override, ASP.NET Core, Symfony and Laravel serve a POST
// as the method a header (X-HTTP-Method-Override and the like) or a
// "_method" parameter names. Overrides collects what btk can see of
// them, where the rules apply (not on every key check), and Readings decides
// each as one more method of the request.

// ValidToken reports whether m is an HTTP token (RFC 9110 §5.6.2), the
// spelling of every method: a request line's method is one, and a method
// named otherwise (X-Forwarded-Method, an override header) is refused
// where the rules apply rather than read as some server might read it.
func ValidToken(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// MaxMethodOverrides bounds the method-override values of one request
// (headers and "_method" parameters together); a request with more is
// refused where the rules apply (docs/access.md#method-override-headers).
const MaxMethodOverrides = 8

// QueryOverrides appends to out the values of query's "_method"
// parameters, percent-decoded, and returns it; out unchanged, without
// allocating, when there are none. Symfony and Laravel (with their
// parameter override on, Laravel's default) read "_method" from the query
// when the body has none, and Express's method-override reads it there
// when told to. A key is read as the frameworks' parsers read it:
// percent-decoded with "+" for a space, cut at a NUL as PHP cuts it, PHP's
// leading spaces dropped and its "." and " " read as "_" ("?.method=DELETE"
// is "_method" to PHP), and
// "_method[…]" an array whose first value Express takes. Pairs are split on
// "&" and on ";" (which some parsers split on too): a value is then seen
// whole or in parts, and every part is decided.
//
// It stops once out holds more than MaxMethodOverrides values: Readings
// refuses the request then, whatever the rest holds.
func QueryOverrides(query string, out []string) []string {
	for query != "" && len(out) <= MaxMethodOverrides {
		var pair string
		if i := strings.IndexAny(query, "&;"); i >= 0 {
			pair, query = query[:i], query[i+1:]
		} else {
			pair, query = query, ""
		}
		key, val, _ := strings.Cut(pair, "=")
		if strings.IndexByte(key, '%') >= 0 || strings.IndexByte(key, '+') >= 0 {
			key = decodeQuery(key)
		}
		if methodKey(key) {
			out = append(out, decodeQuery(val))
		}
	}
	return out
}

// methodKey reports whether a decoded query key is "_method" to some
// parser (QueryOverrides).
func methodKey(key string) bool {
	// PHP takes a name's length with strlen: it ends at the first NUL, so
	// "_method%00=DELETE" and "_method%00x=DELETE" are "_method" to it.
	if i := strings.IndexByte(key, 0); i >= 0 {
		key = key[:i]
	}
	key = strings.TrimLeft(key, " ")
	if i := strings.IndexByte(key, '['); i > 0 {
		key = key[:i]
	}
	const want = "_method"
	if len(key) != len(want) {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '.' || c == ' ' {
			c = '_'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// decodeQuery is a query component percent-decoded leniently (a bad escape
// stays as it is, as PHP's and qs's decoders leave it) with "+" for a
// space.
func decodeQuery(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		b = append(b, c)
	}
	return string(b)
}

// Overrides returns the values of the method-override headers of h
// (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) with those of
// query's "_method" parameters, and the values of its URL-override headers
// (X-Original-URL, X-Rewrite-URL); nil, without allocating, when there are
// none. A name is matched without regard to case and with "_" for "-":
// Rack and PHP read X_HTTP_Method_Override as the same variable, and Go
// does not canonicalise a name with "_", so no lookup by canonical name
// would find every spelling. One walk over h for both: a map walk costs a
// request more than the names' comparisons. URL values stop once there are
// more than MaxURLOverrides: the request is refused then.
func Overrides(h map[string][]string, query string) (methods, urls []string) {
	methods = QueryOverrides(query, nil)
	for name, vs := range h {
		switch len(name) {
		case len("X-HTTP-Method"), len("X-Method-Override"), len("X-HTTP-Method-Override"), len("X-Original-URL"):
			switch {
			case sameHeaderName(name, "x-http-method") || sameHeaderName(name, "x-method-override") || sameHeaderName(name, "x-http-method-override"):
				methods = append(methods, vs...)
			case sameHeaderName(name, "x-original-url") || sameHeaderName(name, "x-rewrite-url"):
				if len(urls) <= MaxURLOverrides {
					urls = append(urls, vs...)
				}
			}
		}
	}
	return methods, urls
}

// sameHeaderName reports whether name is want (in lower case, with "-")
// without regard to case and with "_" read as "-".
func sameHeaderName(name, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// URL overrides (docs/access.md#url-override-headers): Symfony before its
// fix of CVE-2018-14773, zend-diactoros and zend-http, and applications
// behind IIS's URL Rewrite serve the path that X-Original-URL or
// X-Rewrite-URL names instead of the request line's. Overrides collects
// them, where the rules apply, and the key check decides each as one more
// path of the request.

// MaxURLOverrides bounds the URL-override values of one request; a request
// with more is refused where the rules apply. No client sends more than one.
const MaxURLOverrides = 4

// MaxPathDecisions bounds the paths of one request (its own and each URL
// override's) times its method overrides: each pair is decided against
// every reading of the path, and a refused request spends none of the key's
// limits, so each count within its bound could still multiply into ms of
// CPU (docs/access.md#url-override-headers).
const MaxPathDecisions = 8
