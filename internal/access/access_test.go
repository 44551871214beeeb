package access

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const sample = `rules:                       # first match wins
  - path: /orders/**
    methods: [GET, HEAD]
    scopes: [orders:read]
  - path: /orders/**
    methods: [POST]
    scopes: [orders:write]
  - path: /admin/**
    deny: true
  - path: /users/*/profile
    scopes: [users:read]
  - path: /health
`

func TestMatchFirstWins(t *testing.T) {
	r, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         int // rule index, -1 for none
	}{
		{"GET", "/orders", 0},
		{"GET", "/orders/42", 0},
		{"HEAD", "/orders/42/lines/1", 0},
		{"POST", "/orders/42", 1},
		{"DELETE", "/orders/42", -1},
		{"GET", "/admin", 2},
		{"DELETE", "/admin/x/y", 2},
		{"GET", "/users/7/profile", 3},
		{"GET", "/users/7/profile/x", -1},
		{"GET", "/users/7", -1},
		{"GET", "/health", 4},
		{"GET", "/health/", -1},
		{"GET", "/other", -1},
	} {
		got := -1
		if ru := r.Match(tc.method, tc.path); ru != nil {
			got = ru.Index
		}
		if got != tc.want {
			t.Errorf("%s %s matched rule %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
	// An earlier, more general rule beats a later, more specific one.
	r, err = Parse([]byte("rules:\n  - path: /a/**\n    deny: true\n  - path: /a/b\n    scopes: [x]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ru := r.Match("GET", "/a/b"); ru == nil || ru.Index != 0 {
		t.Errorf("/a/b matched %+v, want the first rule", ru)
	}
}

func TestMatchFold(t *testing.T) {
	r, err := Parse([]byte("rules:\n  - path: /admin/**\n    deny: true\n  - path: /API/Orders/*\n    scopes: [orders:read]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/ADMIN/x", 0},
		{"/Admin", 0},
		{"/api/orders/7", 1},
		{"/Api/ORDERS/7", 1},
		{"/api/orders", -1},
		{"/API/ORDERS/7/X", -1},
	} {
		got := -1
		if ru := r.MatchFold("GET", tc.path); ru != nil {
			got = ru.Index
		}
		if got != tc.want {
			t.Errorf("MatchFold %s = rule %d, want %d", tc.path, got, tc.want)
		}
	}
	if ru := r.Match("GET", "/ADMIN/x"); ru != nil {
		t.Errorf("Match is case-sensitive, matched %+v", ru)
	}
	lower, _ := Parse([]byte(sample))
	if lower.Folds("/orders/42") || !lower.Folds("/Orders/42") || !r.Folds("/orders/42") {
		t.Error("Folds: a lower-case path under lower-case patterns needs no folding; anything else does")
	}
	// Only the segments the walk reaches are lowered: the readings of a
	// hostile 8 KiB path (Readings) are each matched without regard to
	// case, and lowering every one whole cost a copy of 8 KiB apiece.
	long := "/ADMIN/" + strings.Repeat("X/", MaxPathLen/2-4)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if ru := r.MatchFold("GET", long); ru == nil || ru.Index != 0 {
			t.Fatalf("MatchFold of a long path = %+v, want rule 0", ru)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 100*256 {
		t.Errorf("MatchFold of a %d-byte path allocates %d bytes a call", len(long), n/100)
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rules:\n  - path: /a\n    scope: [x]\n", `access rules:3: unknown field "scope"`},
		{"rule:\n  - path: /a\n", `access rules:1: unknown field "rule"`},
		{"rules:\n  - path: a/b\n", `access rules:2: path "a/b" must start with /`},
		{"rules:\n  - path: /a/**/b\n", "access rules:2: path \"/a/**/b\": ** may only be the last segment"},
		{"rules:\n  - path: /a*\n", "access rules:2: path \"/a*\": * and ** stand alone"},
		// No suffix wildcard (docs/access.md#format-suffixes-rails-spring).
		{"rules:\n  - path: /admin/users.*\n", "access rules:2: path \"/admin/users.*\": * and ** stand alone"},
		{"rules:\n  - path: /a/../b\n", "access rules:2: path \"/a/../b\" must be written decoded"},
		{"rules:\n  - path: /a\n    methods: [get]\n", `access rules:3: method "get"`},
		{"rules:\n  - path: /a\n    scopes: [Orders]\n", `access rules:3: scope "Orders"`},
		{"rules:\n  - path: /a\n    deny: yes please\n", "access rules:3: deny must be true or false"},
		{"rules:\n  - path: /a\n    deny: true\n    scopes: [x]\n", "access rules:2: a deny rule takes no scopes"},
		{"rules:\n  - methods: [GET]\n", "access rules:2: rule has no path"},
		{"rules:\n  - path: /a\n  - [\n", "access rules:"},
		{"", "empty file"},
		{"# nothing\n", "empty file"},
		// A second list or document would drop the rules before it unsaid.
		{"rules:\n  - path: /admin/**\n    deny: true\nrules:\n  - path: /orders/**\n", `access rules:4: field "rules" given twice`},
		{"rules:\n  - path: /admin/**\n    deny: true\n---\nrules:\n  - path: /orders/**\n", "access rules:4: a second YAML document"},
		{"rules:\n  - path: /a\n---\n- [\n", "access rules:"},
		{"rules:\n  - path: /a\n---\n---\nrules: []\n", "access rules:4: a second YAML document"},
		// A tag does not make a document or a deny mean what it does not
		// say: "!!null" on a mapping still holds rules, and "!!bool yes" is
		// no "true" (it was read as false: the deny became an allow).
		{"rules:\n  - path: /a\n--- !!null\nrules:\n  - path: /admin/**\n    deny: true\n", "a second YAML document"},
		{"rules:\n  - path: /admin/**\n    deny: !!bool yes\n", "access rules:3: deny must be true or false"},
		{"rules:\n  - path: /admin/**\n    deny: !!bool 1\n", "access rules:3: deny must be true or false"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// A document marker that holds nothing, before or after the rules, drops
// nothing and is allowed.
func TestParseBareDocumentMarkers(t *testing.T) {
	for _, doc := range []string{"---\nrules:\n  - path: /a\n", "rules:\n  - path: /a\n---\n", "rules:\n  - path: /a\n...\n"} {
		if r, err := Parse([]byte(doc)); err != nil || r.Len() != 1 {
			t.Errorf("Parse(%q) = %d rules, %v; want 1", doc, r.Len(), err)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/orders/1", "/orders/1", true},
		{"/orders/1?x=/admin", "/orders/1", true},
		{"/orders/./1", "/orders/1", true},
		{"/orders/x/../1", "/orders/1", true},
		{"/orders/%2e%2e/admin", "/admin", true},
		{"/orders/%2E%2E/%2e%2E/admin", "", false},
		{"/a/b/..", "/a/", true},
		{"/%61dmin", "/admin", true},
		{"/../admin", "", false},
		{"/a%zz", "", false},
		{"/a%00b", "", false},
		{"orders", "", false},
		{"", "", false},
		{"https://example.com/orders/1?q", "/orders/1", true},
		{"/a/.hidden/..x", "/a/.hidden/..x", true},
	} {
		got, ok := Normalize(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Normalize(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Normalize("/orders/42/lines") }); n != 0 {
		t.Errorf("a clean path costs %v allocations", n)
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	r, _ := Parse([]byte(sample))
	if n := testing.AllocsPerRun(100, func() { r.Match("GET", "/users/7/profile") }); n != 0 {
		t.Errorf("Match costs %v allocations", n)
	}
}

// rulesFile makes a file of n rules in the shapes operators write, the
// matched rule among them.
func rulesFile(n int) []byte {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - path: /svc%d/items/*/**\n    methods: [GET]\n    scopes: [svc%d:read]\n", i, i)
	}
	b.WriteString("  - path: /orders/*/lines/**\n    scopes: [orders:read]\n")
	return []byte(b.String())
}

// BenchmarkMatch compares a 10-rule and a 1,000-rule file on the same
// request: the trie follows the path, so both cost the same.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{10, 1000} {
		r, err := Parse(rulesFile(n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			for b.Loop() {
				p, _ := Normalize("/orders/42/lines/7")
				if r.Match("GET", p) == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

func TestReadings(t *testing.T) {
	for _, tc := range []struct {
		method, raw string
		want        []Request
		ok          bool
	}{
		{"GET", "/orders/1", nil, true},
		{"GET", "/orders/1?x=//;\\", nil, true},
		{"GET", "//admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public//../admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public/..;/admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/admin;v=1/x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/public/..%5Cadmin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public/%2e%2e%3b/admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/a/..;/..;/x", nil, false},
		{"delete", "/x", []Request{{"DELETE", "/x", true}}, true},
		{"HEAD", "/x", []Request{{"GET", "/x", true}}, true},
		{"GET", "/public#/../admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public?q#/../admin", nil, true},
		{"GET", "http://example.com/public#/../admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "https://example.com#/admin", []Request{{"GET", "/admin", false}}, true},
		{"head", "/x", []Request{{"HEAD", "/x", true}, {"GET", "/x", true}}, true},
		{"get", "/a;x", []Request{{"GET", "/a;x", true}, {"get", "/a", false}, {"GET", "/a", true}}, true},
		{"GET", "/orders/%31", nil, true},
		{"GET", "/public/%252e%252e/admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public/%252e%252e%252fadmin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/files/100%25", nil, true},
		{"GET", "/files/100%2541", []Request{{"GET", "/files/100A", false}}, true},
		{"GET", "/admin%2500", nil, false},
		// The second decoding is lenient, as PHP's and Python's are: a bad
		// escape beside a good one does not keep the good one from decoding.
		{"GET", "/%2561dmin/x%25", []Request{{"GET", "/admin/x%", false}}, true},
		{"GET", "/%2561dmin/x%25zz", []Request{{"GET", "/admin/x%zz", false}}, true},
		{"GET", "/x%25zz%2500", nil, false},
		{"GET", "/public#/%252e%252e/admin", []Request{{"GET", "/public#/%2e%2e/admin", false}, {"GET", "/admin", false}}, true},
		// IIS (Windows) drops a segment's trailing dots and spaces, after
		// removing dot segments: "." and ".." keep their meaning, and
		// ".. " or "..." is a name, never "..", so it never climbs; a
		// segment left empty is dropped as Windows collapses separators.
		{"GET", "/admin./x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/admin%20/x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/admin /x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/admin.%20./x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/admin%2e/x", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/admin.", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/admin.?q", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/orders/./1/../2", nil, true},
		{"GET", "/orders/v1.2/x.json", nil, true},
		{"GET", "/public/.../admin", []Request{{"GET", "/public/admin", false}}, true},
		{"GET", "/public/..%20/admin", []Request{{"GET", "/public/admin", false}}, true},
		{"GET", "/admin/...", []Request{{"GET", "/admin/", false}}, true},
		{"GET", "/.../admin", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/public/x./../admin", nil, true}, // ".." first: "/admin" either way
		// With the other readings: "\" for "/" (IIS too), ";" dropped.
		{"GET", "/admin.\\x", []Request{{"GET", "/admin./x", false}, {"GET", "/admin/x", false}}, true},
		{"GET", "/admin.;v=1/x", []Request{{"GET", "/admin./x", false}, {"GET", "/admin/x", false}}, true},
		{"GET", "/admin%252e/x", []Request{{"GET", "/admin./x", false}, {"GET", "/admin/x", false}}, true},
		// A decoded "?" or "#" is where a server that parses the decoded
		// path again cuts off a query or fragment.
		{"GET", "/admin%3F.css", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/admin%3f.css", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/admin%23.css", []Request{{"GET", "/admin", false}}, true},
		{"GET", "/admin/x%3F/../../public", []Request{{"GET", "/admin/x", false}}, true},
		{"GET", "/public%3F/../admin", []Request{{"GET", "/public", false}}, true},
		{"GET", "/admin%253F.css", []Request{{"GET", "/admin?.css", false}, {"GET", "/admin", false}}, true},
		{"GET", "/admin%3F%252e%252e", []Request{{"GET", "/admin", false}, {"GET", "/admin?..", false}, {"GET", "/admin?", false}}, true},
		{"GET", "/public%2523/../admin", []Request{{"GET", "/public", false}}, true}, // decoded twice, then cut
		{"GET", "/..%3F/..", nil, false}, // cut: "/..", which climbs
		{"GET", "/admin.%3F.css", []Request{{"GET", "/admin.", false}, {"GET", "/admin", false}}, true},
		{"GET", "/orders/1?x=%3F", nil, true}, // in the query: nothing to cut
	} {
		got, ok := Readings(tc.method, tc.raw)
		if ok != tc.ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Readings(%q, %q) = %v, %v; want %v, %v", tc.method, tc.raw, got, ok, tc.want, tc.ok)
		}
	}
	// A path past MaxPathLen is refused: each reading of it would cost
	// milliseconds, for refusals that count against no limit.
	long := "/" + strings.Repeat("a;b\\//", MaxPathLen/6+1)
	if _, ok := Readings("get", long); ok {
		t.Errorf("Readings of a %d-byte path: ok", len(long))
	}
	if _, ok := Normalize(long); ok {
		t.Errorf("Normalize of a %d-byte path: ok", len(long))
	}
	if n, ok := Normalize("/" + strings.Repeat("a", MaxPathLen-1)); !ok || len(n) != MaxPathLen {
		t.Errorf("Normalize of a %d-byte path refused", MaxPathLen)
	}
	// A plain path costs nothing: dots inside a segment, dot segments
	// (Normalize's), a space inside a segment, a query with escapes.
	for _, p := range []string{"/orders/42/lines", "/orders/v1.2/lines.json", "/orders/./42/../42", "/files/a b/c", "/orders/42?q=a.+b%3F&c=d.", "/a/.."} {
		if n := testing.AllocsPerRun(100, func() { Readings("GET", p) }); n != 0 {
			t.Errorf("a plain request (%s) costs %v allocations", p, n)
		}
	}
}

// TestReadingsMethodOverrides: a method-override header's value is one more
// method reading (docs/access.md#method-override-headers), in upper case
// and decided in full (not IfMatched: the upstream runs that method); a
// value that is no method token refuses the request, as a method that is
// none does.
func TestReadingsMethodOverrides(t *testing.T) {
	for _, tc := range []struct {
		method, raw string
		overrides   []string
		want        []Request
		ok          bool
	}{
		{"POST", "/reports/1", []string{"DELETE"}, []Request{{"DELETE", "/reports/1", false}}, true},
		{"POST", "/reports/1", []string{"delete"}, []Request{{"DELETE", "/reports/1", false}}, true},
		{"POST", "/reports/1", []string{"POST"}, nil, true},
		{"POST", "/reports/1", []string{""}, nil, true}, // overrides nothing, to any framework
		{"POST", "/reports/1", []string{"DELETE", "PUT", "delete"}, []Request{{"DELETE", "/reports/1", false}, {"PUT", "/reports/1", false}}, true},
		// An override that is also another reading's method is decided in full.
		{"post", "/x", []string{"POST"}, []Request{{"POST", "/x", false}}, true},
		{"POST", "/x", []string{"head"}, []Request{{"HEAD", "/x", false}, {"GET", "/x", true}}, true},
		// Every path reading meets every method reading.
		{"POST", "//reports/1", []string{"DELETE"}, []Request{{"DELETE", "//reports/1", false}, {"POST", "/reports/1", false}, {"DELETE", "/reports/1", false}}, true},
		// No method token: refused, not guessed at ("DELETE, GET" is DELETE
		// to Express).
		{"POST", "/x", []string{"DELETE, GET"}, nil, false},
		{"POST", "/x", []string{"DEL ETE"}, nil, false},
		{"POST", "/x", []string{"GET", "DEL\x00"}, nil, false},
		{"PO ST", "/x", nil, nil, false},
		{"", "/x", nil, nil, false},
		{"M-SEARCH", "/x", nil, nil, true},
		// At most MaxMethodOverrides (8) values: each is decided against
		// every reading of the path, and a refusal counts against no limit.
		{"POST", "/x", []string{"A", "B", "C", "D", "E", "F", "G", "H"}, []Request{
			{"A", "/x", false}, {"B", "/x", false}, {"C", "/x", false}, {"D", "/x", false},
			{"E", "/x", false}, {"F", "/x", false}, {"G", "/x", false}, {"H", "/x", false}}, true},
		{"POST", "/x", []string{"A", "B", "C", "D", "E", "F", "G", "H", "I"}, nil, false},
		{"POST", "/x", []string{"GET", "GET", "GET", "GET", "GET", "GET", "GET", "GET", "GET"}, nil, false},
	} {
		got, ok := Readings(tc.method, tc.raw, tc.overrides...)
		if ok != tc.ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Readings(%q, %q, %q) = %v, %v; want %v, %v", tc.method, tc.raw, tc.overrides, got, ok, tc.want, tc.ok)
		}
	}
	var none []string
	if n := testing.AllocsPerRun(100, func() { Readings("POST", "/orders/42/lines", none...) }); n != 0 {
		t.Errorf("a plain request without override headers costs %v allocations", n)
	}
}

// TestQueryOverrides: "_method" in a query, as Symfony, Laravel and
// Express's method-override read it (docs/access.md#method-override-headers).
func TestQueryOverrides(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", nil},
		{"page=2&method=DELETE&_methods=PUT&x_method=PUT&_Method=PUT", nil},
		{"_method=DELETE", []string{"DELETE"}},
		{"a=1&_method=delete&b=2", []string{"delete"}},
		{"_method=DELETE&_method=PUT", []string{"DELETE", "PUT"}},
		{"a=1;_method=DELETE", []string{"DELETE"}},
		{"_method=DELETE;x=1", []string{"DELETE"}},
		{"%5Fmethod=DELETE", []string{"DELETE"}}, // decoded key
		{"_%6Dethod=DELETE", []string{"DELETE"}}, // decoded key
		{".method=DELETE", []string{"DELETE"}},   // PHP: "." is "_"
		{"+method=DELETE", nil},                  // PHP drops a leading space: "method"
		{"_+method=DELETE", nil},
		{"+_method=DELETE", []string{"DELETE"}},  // PHP drops leading spaces
		{"_method[]=DELETE", []string{"DELETE"}}, // qs: an array, Express takes the first
		// PHP ends a name at its first NUL (strlen): all "_method" to it.
		{"_method%00=DELETE", []string{"DELETE"}},
		{"_method%00x=DELETE", []string{"DELETE"}},
		{"_method%00%5b%5d=DELETE", []string{"DELETE"}},
		{"%00_method=DELETE", nil},
		{"_method%5B0%5D=PUT", []string{"PUT"}},  // the same, encoded
		{"_method=DEL%45TE", []string{"DELETE"}}, // decoded value
		{"_method=DELETE+GET", []string{"DELETE GET"}},
		{"_method", []string{""}},
		{"_method=%zz", []string{"%zz"}}, // a bad escape stays
		// Collecting stops past MaxMethodOverrides: the request is refused.
		{strings.Repeat("_method=A&", 5000), strings.Fields(strings.Repeat("A ", MaxMethodOverrides+1))},
	} {
		got := QueryOverrides(tc.query, nil)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(got) != len(tc.want) {
			t.Errorf("QueryOverrides(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { QueryOverrides("page=2&sort=-created&q=a%20b+c", nil) }); n != 0 {
		t.Errorf("a query without _method costs %v allocations", n)
	}
}

// TestMethodOverrides: the three override headers, in any case and with
// "_" for "-" (Rack and PHP read X_HTTP_Method_Override as the same
// variable), every value of each, and the query's "_method"; nothing, and
// no allocation, without them (docs/access.md#method-override-headers).
func TestMethodOverrides(t *testing.T) {
	h := map[string][]string{
		"X-Http-Method-Override":  {"DELETE"},
		"X-Http-Method":           {"PUT", "PATCH"},
		"X-Method-Override":       {"OPTIONS"},
		"X_http_method_override":  {"TRACE"},
		"X-Http-Method-Overrides": {"LOCK"},
		"X-Http-Methods":          {"MOVE"},
		"Content-Type":            {"text/plain"},
	}
	got, _ := Overrides(h, "a=1&_method=copy")
	slices.Sort(got)
	if want := []string{"DELETE", "OPTIONS", "PATCH", "PUT", "TRACE", "copy"}; !slices.Equal(got, want) {
		t.Errorf("methodOverrides = %q, want %q", got, want)
	}
	plain := map[string][]string{"X-Api-Key": {"k"}, "User-Agent": {"curl"}, "Accept": {"*/*"}, "X-Forwarded-Method": {"POST"}, "X-Forwarded-Uri": {"/x"}}
	const query = "page=2&sort=-created&method=x&q=a%20b+c"
	if got, _ := Overrides(plain, query); got != nil {
		t.Errorf("methodOverrides without override headers = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { Overrides(plain, query) }); n != 0 {
		t.Errorf("methodOverrides without override headers costs %v allocations", n)
	}
}

// urlOverrides is the URL half of Overrides.
func urlOverrides(h map[string][]string) []string {
	_, urls := Overrides(h, "")
	return urls
}

// TestURLOverrides: X-Original-URL and X-Rewrite-URL in any case and with
// "_" for "-", every value; nothing, and no allocation, without them; and
// collecting stops past MaxURLOverrides (docs/access.md#url-override-headers).
func TestURLOverrides(t *testing.T) {
	h := map[string][]string{
		"X-Original-Url":  {"/a"},
		"X-Rewrite-Url":   {"/b", "/c"},
		"X_original_url":  {"/d"},
		"X-Original-Urls": {"/no"},
		"X-Rewrite":       {"/no"},
		"Content-Type":    {"text/plain"},
	}
	got := urlOverrides(h)
	slices.Sort(got)
	if want := []string{"/a", "/b", "/c", "/d"}; !slices.Equal(got, want) {
		t.Errorf("Overrides, URLs, = %q, want %q", got, want)
	}
	h["X-Original-Url"] = []string{"/a", "/e"}
	if got := urlOverrides(h); len(got) <= MaxURLOverrides {
		t.Errorf("Overrides, URLs, of %d values = %q, want more than %d", 5, got, MaxURLOverrides)
	}
	if got := urlOverrides(map[string][]string{"X-Http-Method": {"PUT"}}); got != nil {
		t.Errorf("Overrides, URLs, of a method override = %q", got)
	}
	plain := map[string][]string{"X-Api-Key": {"k"}, "User-Agent": {"curl"}, "Accept": {"*/*"}, "X-Forwarded-Method": {"POST"}, "X-Forwarded-Uri": {"/x"}}
	if got := urlOverrides(plain); got != nil {
		t.Errorf("Overrides, URLs, without override headers = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { Overrides(plain, "") }); n != 0 {
		t.Errorf("Overrides, URLs, without override headers costs %v allocations", n)
	}
}

// TestRulesFileBounded: a rules file is bounded in bytes and rules, and
// parsing the largest one allowed costs a bounded allocation: a 16 MiB file
// (the bound before) took an instance from 49 MB to 1 GB on SIGHUP.
func TestRulesFileBounded(t *testing.T) {
	rules := func(n int) []byte {
		var b strings.Builder
		b.WriteString("rules:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - path: /p%d/*/x/**\n    scopes: [s%d]\n", i, i)
		}
		return []byte(b.String())
	}
	if r, err := Parse(rules(MaxRules)); err != nil || r.Len() != MaxRules {
		t.Fatalf("%d rules: %v", MaxRules, err)
	}
	_, err := Parse(rules(MaxRules + 1))
	var e *Error
	if !errors.As(err, &e) || e.Line != 2+2*MaxRules || !strings.Contains(e.Reason, "more than 10000 rules") {
		t.Fatalf("%d rules: %v", MaxRules+1, err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	big := append(rules(MaxRules), strings.Repeat("# padding\n", MaxFileSize/10)...)
	if err := os.WriteFile(file, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Fatalf("a %d-byte file: %v", len(big), err)
	}
	// The largest file allowed, rules as dense as they come: what parsing
	// it allocates (the YAML tree, then the rules).
	var dense strings.Builder
	dense.WriteString("rules:\n")
	for i := 0; dense.Len() < MaxFileSize-64; i++ {
		fmt.Fprintf(&dense, "- path: /%d\n", i)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Parse([]byte(dense.String()))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than 10000 rules") {
		t.Fatalf("a dense 1 MiB file: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
		t.Errorf("parsing a 1 MiB file allocated %d MB, want at most 128", alloc>>20)
	}
}
