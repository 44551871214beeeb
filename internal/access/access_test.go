package access

import (
	"fmt"
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
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rules:\n  - path: /a\n    scope: [x]\n", `access rules:3: unknown field "scope"`},
		{"rule:\n  - path: /a\n", `access rules:1: unknown field "rule"`},
		{"rules:\n  - path: a/b\n", `access rules:2: path "a/b" must start with /`},
		{"rules:\n  - path: /a/**/b\n", "access rules:2: path \"/a/**/b\": ** may only be the last segment"},
		{"rules:\n  - path: /a*\n", "access rules:2: path \"/a*\": * and ** stand alone"},
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
	if n := testing.AllocsPerRun(100, func() { Readings("GET", "/orders/42/lines") }); n != 0 {
		t.Errorf("a plain request costs %v allocations", n)
	}
}
