// Package access is btk's access rules (docs/access.md): a YAML file that
// maps requests (method and path) to the scopes a key needs, or denies them.
// Rules are kept in a trie on path segments, so matching costs the same with
// ten rules and with a thousand: it follows the request's segments, not the
// list of rules. The first rule of the file that matches wins.
package access

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize and MaxRules bound a rules file: what the server holds to
// parse and keep it. Parsing a 1 MiB file allocates about 55 MB (the YAML
// tree) and keeps about 1 KB a rule; a 16 MiB file (the bound before) took
// an instance from 49 MB to 1 GB on SIGHUP. Real files hold tens to
// hundreds of rules; the benchmarks use 1,000 (docs/access.md#the-rules-file).
const (
	MaxFileSize = 1 << 20
	MaxRules    = 10000
)

// Rule is one entry of the file.
type Rule struct {
	// Index is the rule's position in the file (0-based): the lowest
	// matching index wins.
	Index   int
	Line    int
	Path    string
	Methods []string // nil = any method
	Scopes  []string // every one is needed
	Deny    bool
}

// allows reports whether the rule applies to method.
func (r *Rule) allows(method string) bool {
	if r.Methods == nil {
		return true
	}
	for _, m := range r.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// Rules is a parsed rules file. The zero value and nil have no rules.
type Rules struct {
	root  node
	count int
	// folded is the trie of the patterns in lower case, for MatchFold;
	// upper tells whether a pattern has an upper-case letter.
	folded node
	upper  bool
	// slash tells whether a literal pattern ends with "/" ("/admin/"),
	// for SlashEnds.
	slash bool
}

// node is one path segment of the trie. Rules ending here are in rules,
// those whose pattern ends with ** here in rest; both ordered by Index.
type node struct {
	exact map[string]*node
	star  *node
	rules []*Rule
	rest  []*Rule
}

// Len is the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return r.count
}

// Match returns the first rule (in file order) that matches method and the
// normalised path (see Normalize), or nil.
func (r *Rules) Match(method, path string) *Rule {
	if r == nil || r.count == 0 || len(path) == 0 || path[0] != '/' {
		return nil
	}
	var best *Rule
	r.root.match(method, path[1:], false, &best)
	return best
}

// Folds reports whether MatchFold can differ from Match for path: the
// path or a pattern has an upper-case letter.
func (r *Rules) Folds(path string) bool {
	if r == nil || r.count == 0 {
		return false
	}
	if r.upper {
		return true
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; 'A' <= c && c <= 'Z' || c >= 0x80 {
			return true
		}
	}
	return false
}

// SlashEnds reports whether a pattern ends with "/" ("/admin/"): only
// then can a path without its trailing slash match otherwise with one.
func (r *Rules) SlashEnds() bool { return r != nil && r.slash }

// MatchFold is Match without regard to case: the first rule (in file
// order) whose pattern matches path when both are in lower case, as a
// server that routes case-insensitively (Express, ASP.NET Core, IIS) would
// take them.
func (r *Rules) MatchFold(method, path string) *Rule {
	if r == nil || r.count == 0 || len(path) == 0 || path[0] != '/' {
		return nil
	}
	var best *Rule
	r.folded.match(method, path[1:], true, &best)
	return best
}

// match walks the segments of path (without its leading slash) from n,
// keeping in best the matching rule of lowest index. It explores the exact
// child and the * child of each segment: its cost depends on the depth of
// the path, not on the number of rules. With fold, each segment is looked
// up in lower case (the folded trie): only the segments walked are
// lowered, not an 8 KiB path for every reading (Readings).
func (n *node) match(method, path string, fold bool, best **Rule) {
	for _, ru := range n.rest { // ** matches the rest, also when empty
		if *best != nil && ru.Index >= (*best).Index {
			break
		}
		if ru.allows(method) {
			*best = ru
			break
		}
	}
	seg, rest, more := path, "", false // strings.Cut(path, "/"), without its general search
	if i := strings.IndexByte(path, '/'); i >= 0 {
		seg, rest, more = path[:i], path[i+1:], true
	}
	if n.exact != nil {
		if fold {
			seg = strings.ToLower(seg) // allocates only for an upper-case segment
		}
		if c := n.exact[seg]; c != nil {
			c.next(method, rest, more, fold, best)
		}
	}
	if n.star != nil {
		n.star.next(method, rest, more, fold, best)
	}
}

// next continues at child n after one segment: at the end of the path its
// own rules apply, otherwise the walk goes on.
func (n *node) next(method, rest string, more, fold bool, best **Rule) {
	if more {
		n.match(method, rest, fold, best)
		return
	}
	for _, ru := range n.rules {
		if *best != nil && ru.Index >= (*best).Index {
			break
		}
		if ru.allows(method) {
			*best = ru
			break
		}
	}
	for _, ru := range n.rest {
		if *best != nil && ru.Index >= (*best).Index {
			break
		}
		if ru.allows(method) {
			*best = ru
			break
		}
	}
}

func (r *Rules) add(ru *Rule) {
	lower := strings.ToLower(ru.Path)
	r.upper = r.upper || lower != ru.Path
	r.slash = r.slash || len(ru.Path) > 1 && strings.HasSuffix(ru.Path, "/")
	r.root.add(ru, ru.Path)
	r.folded.add(ru, lower)
	r.count++
}

// add files ru under pattern in the trie at n.
func (n *node) add(ru *Rule, pattern string) {
	segs := strings.Split(pattern[1:], "/")
	for i, seg := range segs {
		if seg == "**" && i == len(segs)-1 {
			n.rest = append(n.rest, ru)
			return
		}
		var c *node
		if seg == "*" {
			if n.star == nil {
				n.star = &node{}
			}
			c = n.star
		} else {
			if n.exact == nil {
				n.exact = make(map[string]*node)
			}
			if c = n.exact[seg]; c == nil {
				c = &node{}
				n.exact[seg] = c
			}
		}
		n = c
	}
	n.rules = append(n.rules, ru)
}

// Error is a problem in a rules file, with its line.
type Error struct {
	File   string
	Line   int
	Reason string
}

func (e *Error) Error() string {
	name := e.File
	if name == "" {
		name = "access rules"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", name, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", name, e.Reason)
}

// Load reads and parses a rules file.
func Load(file string) (*Rules, error) {
	f, err := os.Open(file) // #nosec G304 -- the rules file the operator named
	if err != nil {
		return nil, &Error{File: file, Reason: err.Error()}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{File: file, Reason: err.Error()}
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Reason: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	r, err := Parse(data)
	var e *Error
	if errors.As(err, &e) {
		e.File = file
	}
	return r, err
}

// Parse reads a rules document:
//
//	rules:
//	  - path: /orders/**
//	    methods: [GET, HEAD]
//	    scopes: [orders:read]
//	  - path: /admin/**
//	    deny: true
//
// Unknown fields, a pattern that is not a clean absolute path, an unknown
// method spelling, a bad scope or deny with scopes are errors, with the line.
func Parse(data []byte) (*Rules, error) {
	// A file of several documents ("---") is refused: yaml.Unmarshal reads
	// the first alone, so rules after the separator would be dropped
	// without a word.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	r := &Rules{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{Reason: `empty file: expected a "rules:" list`}
	}
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlError(err)
		}
		// A bare "---" (an empty scalar) drops nothing; a mapping tagged
		// "!!null" still holds rules.
		if c := next.Content; len(c) > 0 && (c[0].Kind != yaml.ScalarNode || c[0].Tag != "!!null") {
			return nil, &Error{Line: next.Line, Reason: `a second YAML document ("---"): put every rule in one "rules:" list`}
		}
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, &Error{Line: top.Line, Reason: `expected a mapping with a "rules:" list`}
	}
	var list *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value != "rules" {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("unknown field %q (expected rules)", k.Value)}
		}
		if list != nil { // the later list would replace the earlier one
			return nil, &Error{Line: k.Line, Reason: `field "rules" given twice`}
		}
		list = v
	}
	if list == nil {
		return nil, &Error{Line: top.Line, Reason: `missing "rules:" list`}
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return r, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, &Error{Line: list.Line, Reason: "rules must be a list"}
	}
	if len(list.Content) > MaxRules {
		return nil, &Error{Line: list.Content[MaxRules].Line, Reason: fmt.Sprintf("more than %d rules", MaxRules)}
	}
	for i, item := range list.Content {
		ru, err := parseRule(item)
		if err != nil {
			return nil, err
		}
		ru.Index = i
		r.add(ru)
	}
	return r, nil
}

func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		return &Error{Reason: te.Errors[0]}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if _, e := fmt.Sscanf(msg, "line %d:", &line); e == nil {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			msg = rest
		}
	}
	return &Error{Line: line, Reason: msg}
}

func parseRule(item *yaml.Node) (*Rule, error) {
	if item.Kind != yaml.MappingNode {
		return nil, &Error{Line: item.Line, Reason: "a rule must be a mapping with path and scopes, methods or deny"}
	}
	ru := &Rule{Line: item.Line}
	seen := map[string]bool{}
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		if seen[k.Value] {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("field %q given twice", k.Value)}
		}
		seen[k.Value] = true
		switch k.Value {
		case "path":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				return nil, &Error{Line: v.Line, Reason: "path must be a string"}
			}
			if err := checkPattern(v.Value); err != nil {
				return nil, &Error{Line: v.Line, Reason: err.Error()}
			}
			ru.Path = v.Value
		case "methods":
			ms, err := strings1(v, "methods")
			if err != nil {
				return nil, err
			}
			ru.Methods = []string{}
			for _, m := range ms {
				if !validMethod(m) {
					return nil, &Error{Line: v.Line, Reason: fmt.Sprintf("method %q must be an upper-case HTTP method token such as GET", m)}
				}
				ru.Methods = append(ru.Methods, m)
			}
			if len(ru.Methods) == 0 {
				return nil, &Error{Line: v.Line, Reason: "methods must not be empty (omit it for any method)"}
			}
		case "scopes":
			ss, err := strings1(v, "scopes")
			if err != nil {
				return nil, err
			}
			for _, s := range ss {
				if !ValidScope(s) {
					return nil, &Error{Line: v.Line, Reason: fmt.Sprintf("scope %q must match [a-z0-9:._-]{1,64}", s)}
				}
			}
			ru.Scopes = ss
		case "deny":
			// The YAML 1.2 spellings only: an explicit "!!bool yes" (or 1,
			// on) was read as false, and the deny became an allow.
			switch {
			case v.Kind != yaml.ScalarNode || v.Tag != "!!bool":
				return nil, &Error{Line: v.Line, Reason: "deny must be true or false"}
			case v.Value == "true" || v.Value == "True" || v.Value == "TRUE":
				ru.Deny = true
			case v.Value != "false" && v.Value != "False" && v.Value != "FALSE":
				return nil, &Error{Line: v.Line, Reason: "deny must be true or false"}
			}
		default:
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("unknown field %q (expected path, methods, scopes or deny)", k.Value)}
		}
	}
	if ru.Path == "" {
		return nil, &Error{Line: item.Line, Reason: "rule has no path"}
	}
	if ru.Deny && len(ru.Scopes) > 0 {
		return nil, &Error{Line: item.Line, Reason: "a deny rule takes no scopes"}
	}
	return ru, nil
}

func strings1(v *yaml.Node, what string) ([]string, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, &Error{Line: v.Line, Reason: what + " must be a list"}
	}
	out := make([]string, 0, len(v.Content))
	for _, c := range v.Content {
		if c.Kind != yaml.ScalarNode {
			return nil, &Error{Line: c.Line, Reason: what + " must be a list of strings"}
		}
		out = append(out, c.Value)
	}
	return out, nil
}

func validMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// MaxScopeLen is the longest scope, in bytes.
const MaxScopeLen = 64

// ValidScope reports whether s is a scope's spelling: [a-z0-9:._-]{1,64}.
// Keys' scopes and access rules' scopes are checked by this one function,
// so that a rule can name every scope a key can hold.
func ValidScope(s string) bool {
	if len(s) == 0 || len(s) > MaxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(":._-", c) >= 0) {
			return false
		}
	}
	return true
}

// checkPattern accepts an absolute path whose segments are literal, * (one
// segment) or a final ** (the rest); literal segments must already be in the
// normal form requests are matched in.
func checkPattern(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q must start with /", p)
	}
	if n, ok := Normalize(p); !ok || n != p {
		if !strings.Contains(p, "%") && !strings.Contains(p, "/.") {
			return fmt.Errorf("path %q is not a plain path", p)
		}
		return fmt.Errorf("path %q must be written decoded and without . or .. segments", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "**" && i != len(segs)-1:
			return fmt.Errorf("path %q: ** may only be the last segment", p)
		case s == "*" || s == "**":
		case strings.Contains(s, "*"):
			return fmt.Errorf("path %q: * and ** stand alone in a segment", p)
		}
	}
	if strings.ContainsAny(p, "?#") {
		return fmt.Errorf("path %q: no query or fragment", p)
	}
	return nil
}
