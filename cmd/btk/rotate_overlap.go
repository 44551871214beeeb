package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// runRotateOverlap is `btk rotate KEY --overlap`: rotation without downtime
// (docs/design.md#rotation-without-downtime). It issues a successor with the
// old key's limits, scopes, networks, expiry and canary mark under a name of
// its own, and revokes nothing; the old key is revoked later with
// `btk revoke`.
func runRotateOverlap(cmd *cobra.Command, opts *rotateOptions) error {
	f := opts.f
	for _, n := range []string{"password-stdin", "elevation-token"} {
		if cmd.Flags().Changed(n) {
			return usageErrorf("--overlap revokes nothing and needs no password or elevation: leave out --%s", n)
		}
	}
	if err := exclusive(cmd, "expires-in", "expires-at", "no-expiry"); err != nil {
		return err
	}
	now := f.now()
	expiresAt, err := parseExpiry(opts.expiresIn, opts.expiresAt, now)
	if err != nil {
		return err
	}
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	old, err := client.ResolveKey(ctx, c, opts.key)
	if err != nil {
		return err
	}
	if old.Status == client.ApiKeyStatusRevoked {
		return &client.Error{Code: btk.CodeKeyRevoked, Message: fmt.Sprintf("key %s is revoked, so there is nothing to overlap with: create a new key with 'btk create'", old.Id)}
	}
	switch {
	case opts.noExpiry:
		expiresAt = nil
	case expiresAt == nil && old.ExpiresAt != nil:
		if !old.ExpiresAt.After(now) {
			return usageErrorf("key %q has expired: give its successor an expiry with --expires-in, --expires-at or --no-expiry", old.Name)
		}
		expiresAt = old.ExpiresAt
	}

	// Everything a rotation's successor inherits, the overlap inherits too:
	// a restriction added to keys later (allowed networks, …) belongs here,
	// or the successor would be less restricted than the key it replaces.
	input := client.CreateApiKeyInput{
		RateLimitPerMinute: old.RateLimitPerMinute,
		RateLimitPerDay:    old.RateLimitPerDay,
		ExpiresAt:          expiresAt,
		Scopes:             old.Scopes,
		AllowedCidrs:       old.AllowedCidrs,
	}
	if old.Canary { // as rotation does: a trap's successor is a trap
		input.Canary = &old.Canary
	}
	var payload client.CreateApiKeyCreateApiKeyCreateApiKeyPayload
	if opts.name != "" {
		input.Name = opts.name
		resp, err := client.CreateApiKey(ctx, c, input)
		if err != nil {
			return nameTaken(ctx, c, opts.name, err)
		}
		payload = resp.CreateApiKey
	} else {
		// Only the names are kept (of MaxKeptNodes keys at most), and only
		// those a successor's could be: a name is at most 64 characters.
		taken := map[string]bool{}
		err := client.EachApiKey(ctx, c, false, func(keys []client.ApiKey) error {
			for _, k := range keys {
				if utf8.RuneCountInString(k.Name) <= btk.MaxNameLen {
					taken[k.Name] = true
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		// A name freed between the listing and the create is fine; one
		// taken meanwhile is skipped, a few times at most.
		for attempt := 0; ; attempt++ {
			input.Name = successorName(old.Name, func(n string) bool { return taken[n] })
			resp, err := client.CreateApiKey(ctx, c, input)
			var ce *client.Error
			if err != nil && errors.As(err, &ce) && ce.Code == btk.CodeNameTaken && attempt < 3 {
				taken[input.Name] = true
				continue
			}
			if err != nil {
				return err
			}
			payload = resp.CreateApiKey
			break
		}
	}
	if p.human() {
		p.readDefaults(ctx, c)
	}
	return p.newKey(payload, payload.ApiKey, payload.PlaintextKey,
		fmt.Sprintf("Created key %q beside %q, which stays active: deploy the new key, then run 'btk revoke %s'",
			payload.ApiKey.Name, old.Name, old.Id))
}

// generation is a name's trailing "-N" (N from 2 to 999) that an earlier
// overlap added.
var generation = regexp.MustCompile(`^(.+)-([2-9]|[1-9][0-9]{1,2})$`)

// successorName is the name of the key that overlaps one named name: name-2,
// or, for name-N, name-(N+1); the next number when that is taken. The result
// is cut to the characters a name may have (btk.MaxNameLen).
func successorName(name string, taken func(string) bool) string {
	base, n := name, 2
	if m := generation.FindStringSubmatch(name); m != nil {
		base = m[1]
		g, _ := strconv.Atoi(m[2])
		n = g + 1
	}
	for ; ; n++ {
		suffix := "-" + strconv.Itoa(n)
		b := []rune(base)
		if len(b)+len([]rune(suffix)) > btk.MaxNameLen {
			b = b[:btk.MaxNameLen-len([]rune(suffix))]
		}
		if candidate := string(b) + suffix; !taken(candidate) {
			return candidate
		}
	}
}
