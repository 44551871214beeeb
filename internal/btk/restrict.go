package btk

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/btk-project/btk/internal/access"
)

// Least privilege (docs/access.md): a key's networks and scopes, the access
// rules that give scopes their meaning, and the workspace key policy.

// MaxCIDRs bounds a key's networks.
const MaxCIDRs = 32

// Refusals of a restricted key (HTTP 403).
var (
	ErrKeyNetwork  = &Error{Code: CodeForbidden, Message: "API key not allowed from this address"}
	ErrKeyPathDeny = &Error{Code: CodeForbidden, Message: "API key may not call this path"}
)

// errLacksScope is the 403 of a key without a scope a rule needs.
func errLacksScope(scope string) error {
	return &Error{Code: CodeForbidden, Message: "API key lacks scope " + scope}
}

// KeyRequest is what the key check knows of the request it decides.
type KeyRequest struct {
	// Addr is the client's address (docs/access.md#client-address); the
	// zero Addr is unknown, which a key with networks is refused for.
	Addr netip.Addr
	// From is the client as the usage counts and the unknown-key throttle
	// see it.
	From Client
	// Rules: apply the access rules to Method and Path (the gateway entry
	// points; /graphql applies the network rule only).
	Rules bool
	// Method and Path are the request the rules decide (Path as sent:
	// Normalize runs here). With Rules and no Path (forward-auth without
	// X-Forwarded-Method / X-Forwarded-Uri) a scoped key is refused.
	Method, Path string
	// Header and Query are where the rules read the request's method
	// overrides (X-HTTP-Method-Override and the like, "_method"), each one
	// more method they decide the request as
	// (docs/access.md#method-override-headers): read only where the rules
	// apply, not on every key check. Query is the raw query when Path
	// holds none (the proxy's); forward-auth's is in Path.
	Header map[string][]string
	Query  string
}

// restrictions is what the key check needs of a key's AllowedCIDRs and
// Scopes, parsed once per record read.
type restrictions struct {
	nets   []netip.Prefix
	scopes []string
	// header is X-Api-Key-Scopes: the scopes, space-separated.
	header string
}

func newRestrictions(k *APIKey) *restrictions {
	r := &restrictions{scopes: k.Scopes, header: strings.Join(k.Scopes, " ")}
	for _, c := range k.AllowedCIDRs {
		if p, err := parseCIDR(c); err == nil {
			r.nets = append(r.nets, p)
		} else {
			// A stored network that no longer parses must not widen the
			// key: keep a range that matches nothing.
			r.nets = append(r.nets, netip.Prefix{})
		}
	}
	return r
}

// prepare parses the key's restrictions for the key check; call it before
// the record is shared (cached).
func (k *APIKey) prepare() *APIKey {
	k.restrictions = newRestrictions(k)
	return k
}

func (r *restrictions) hasScope(s string) bool {
	for _, have := range r.scopes {
		if have == s {
			return true
		}
	}
	return false
}

// ScopesHeader is the value of X-Api-Key-Scopes for the key.
func (k *APIKey) ScopesHeader() string {
	if k.restrictions != nil {
		return k.restrictions.header
	}
	return strings.Join(k.Scopes, " ")
}

// withPolicy sets PolicyExpiresAt on keys of w from its maximum lifetime,
// so that what the service hands out says EXPIRED where the key check
// refuses (policyExpired).
func withPolicy(w *Workspace, keys ...*APIKey) {
	for _, k := range keys {
		if k == nil {
			continue
		}
		if t, ok := lifetimeEnd(k, w); ok {
			k.PolicyExpiresAt = &t
		}
	}
}

// policyExpired reports a key older than its workspace's maximum lifetime.
func policyExpired(k *APIKey, w *Workspace, now time.Time) bool {
	t, ok := lifetimeEnd(k, w)
	return ok && !now.Before(t)
}

// lifetimeEnd is when w's maximum key lifetime ends k; false when w has none.
func lifetimeEnd(k *APIKey, w *Workspace) (time.Time, bool) {
	d := w.KeyPolicy.MaxLifetimeDays
	if d == nil {
		return time.Time{}, false
	}
	return k.CreatedAt.Add(time.Duration(*d) * 24 * time.Hour), true
}

// restrict applies a key's networks and, for the gateway, the access rules,
// in that order (docs/access.md: the numbered order of the key check).
func (s *Service) restrict(k *APIKey, req *KeyRequest) error {
	r := k.restrictions
	if r == nil {
		r = newRestrictions(k)
	}
	if len(r.nets) > 0 {
		ok := false
		if req.Addr.IsValid() {
			a := req.Addr.Unmap()
			for _, p := range r.nets {
				if p.IsValid() && p.Contains(a) {
					ok = true
					break
				}
			}
		}
		if !ok {
			return ErrKeyNetwork
		}
	}
	if !req.Rules {
		return nil
	}
	scoped := len(r.scopes) > 0
	rules := s.rules.Load()
	if req.Path == "" {
		if scoped {
			return ErrKeyPathDeny // fail closed: the original request is unknown
		}
		return nil
	}
	if !scoped && rules.Len() == 0 {
		return nil
	}
	query := req.Query
	if i := strings.IndexByte(req.Path, '?'); i >= 0 {
		query = req.Path[i+1:]
	}
	methods, urls := access.Overrides(req.Header, query)
	// 8 method overrides and 4 URL overrides of an 8 KiB path were 8 ms of
	// CPU a request, uncounted: the product is bounded, not only each count.
	if (1+len(urls))*max(1, len(methods)) > access.MaxPathDecisions {
		return ErrKeyPathDeny
	}
	if err := r.decidePath(rules, req.Method, req.Path, methods); err != nil {
		return err
	}
	// A URL-override header names the path an upstream that honours it
	// serves instead (docs/access.md#url-override-headers): it is decided
	// as the request's path is, with every method reading, and the
	// "_method" of its own query.
	if len(urls) > access.MaxURLOverrides {
		return ErrKeyPathDeny
	}
	for _, u := range urls {
		if u == "" {
			u = "/" // an empty one is the root to Symfony
		}
		m := methods
		if i := strings.IndexByte(u, '?'); i >= 0 {
			m = access.QueryOverrides(u[i+1:], slices.Clip(methods))
		}
		if err := r.decidePath(rules, req.Method, u, m); err != nil {
			return err
		}
	}
	return nil
}

// decidePath decides one path of a request (as sent: Normalize runs here)
// with its method and method overrides: the path as the rules read it,
// then every reading of it as other servers read it ("//", ";parameters",
// "\", a lower-case method, a method-override header), each of which must
// pass too, so that the upstream never serves a path or runs a method the
// rules refuse (docs/access.md#paths).
func (r *restrictions) decidePath(rules *access.Rules, method, raw string, overrides []string) error {
	path, ok := access.Normalize(raw)
	if !ok {
		return ErrKeyPathDeny
	}
	if err := r.decide(rules, method, path, false); err != nil {
		return err
	}
	alts, ok := access.Readings(method, raw, overrides...)
	if !ok {
		return ErrKeyPathDeny
	}
	for _, alt := range alts {
		if err := r.decide(rules, alt.Method, alt.Path, alt.IfMatched); err != nil {
			return err
		}
	}
	return nil
}

// decide applies the access rules to one reading of a request (with
// ifMatched, only a matching rule decides). A rule
// that another server would apply must allow it too, where one matches
// (where none does, the path as it is decides alone):
//   - Express and Spring serve "/admin/" as "/admin": the rule of the path
//     without its trailing slash, and Express serves "/admin" as "/admin/":
//     the rule of the path with one, where a pattern ends with "/";
//   - Express, ASP.NET Core and IIS route without regard to case: the rule
//     that matches when path and patterns are in lower case.
func (r *restrictions) decide(rules *access.Rules, method, path string, ifMatched bool) error {
	if err := r.apply(rules.Match(method, path), ifMatched); err != nil {
		return err
	}
	trimmed := strings.TrimRight(path, "/")
	slash := trimmed != path && trimmed != ""
	if slash {
		if err := r.decideAlso(rules, method, trimmed); err != nil {
			return err
		}
	}
	// Allocates only under a pattern that ends with "/".
	if trimmed != "" && trimmed+"/" != path && rules.SlashEnds() {
		if err := r.decideAlso(rules, method, trimmed+"/"); err != nil {
			return err
		}
	}
	if rules.Folds(path) {
		return r.apply(rules.MatchFold(method, path), true)
	}
	return nil
}

// decideAlso applies the rule that matches another spelling of the path,
// in its case and without regard to case, where one matches.
func (r *restrictions) decideAlso(rules *access.Rules, method, path string) error {
	if err := r.apply(rules.Match(method, path), true); err != nil {
		return err
	}
	if rules.Folds(path) {
		return r.apply(rules.MatchFold(method, path), true)
	}
	return nil
}

// apply decides by the first matching rule (nil: none matched); with
// ifMatched, no match decides nothing.
func (r *restrictions) apply(rule *access.Rule, ifMatched bool) error {
	scoped := len(r.scopes) > 0
	switch {
	case rule == nil:
		if scoped && !ifMatched {
			return ErrKeyPathDeny
		}
	case rule.Deny:
		return ErrKeyPathDeny
	case scoped:
		for _, need := range rule.Scopes {
			if !r.hasScope(need) {
				return errLacksScope(need)
			}
		}
	}
	return nil
}

// SetAccessRules replaces the access rules (btk serve --access-rules, and
// on SIGHUP); nil removes them. Requests decided after it returns use them.
func (s *Service) SetAccessRules(r *access.Rules) { s.rules.Store(r) }

// AccessRules returns the rules in effect (nil when none).
func (s *Service) AccessRules() *access.Rules { return s.rules.Load() }

// parseCIDR reads a CIDR range or a single address, IPv4 or IPv6, in its
// canonical (masked, unmapped) form.
func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone not allowed")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// checkCIDRs validates a key's networks and returns them in canonical form,
// without duplicates.
func checkCIDRs(cidrs []string) ([]string, error) {
	if len(cidrs) > MaxCIDRs {
		return nil, badInput("at most %d networks (allowedCidrs)", MaxCIDRs)
	}
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := parseCIDR(strings.TrimSpace(c))
		if err != nil {
			return nil, badInput("network %q must be an IPv4 or IPv6 address or CIDR range such as 192.0.2.0/24", c)
		}
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return withoutDuplicates(out), nil
}
