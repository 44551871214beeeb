package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type updateOptions struct {
	f          *factory
	key        string
	name       string
	perMinute  *int
	perDay     *int
	defaults   bool
	scopes     []string
	noScopes   bool
	cidrs      []string
	anyAddress bool
}

func newUpdateCmd(f *factory) *cobra.Command {
	opts := &updateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "update KEY",
		Short: "Change an API key's name, rate limits, scopes or networks",
		Long: `Change KEY (a key id, or the name of a key that is not revoked) in place: the
secret stays the same, and the next request with it, on any instance, follows
the change. Only what a flag names changes. --scope replaces the key's scopes
(repeat it for several), --no-scopes removes them all; --allow-cidr replaces
the networks the key may be used from, --any-address allows any;
--default-limits drops the key's own rate limits, so that the workspace's
apply. The flags are one change, made whole or not at all: a refused value
(exit 1, or 6 for a name in use) changes nothing. A revoked key cannot be
changed. See docs/access.md.`,
		Example: `  btk update payments-backend --rate-per-minute 1200
  btk update reporting --scope orders:read --scope invoices:read
  btk update ci-deploy --allow-cidr 192.0.2.0/24 --allow-cidr 2001:db8::/48
  btk update ci-deploy --any-address --no-scopes --name ci-deploy-old
  btk update payments-backend --default-limits`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeKeys),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.key = args[0]
			return runUpdate(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.name, "name", "", "a new `name` for the key")
	fl.Var(intFlag{&opts.perMinute}, "rate-per-minute", "requests per minute allowed to this key")
	fl.Var(intFlag{&opts.perDay}, "rate-per-day", "requests per day allowed to this key")
	fl.BoolVar(&opts.defaults, "default-limits", false, "drop the key's own rate limits: the workspace's apply")
	fl.StringArrayVar(&opts.scopes, "scope", nil, "a `scope` the key holds (repeatable; replaces the key's scopes)")
	fl.BoolVar(&opts.noScopes, "no-scopes", false, "remove every scope (the access rules then refuse the key only where they deny)")
	fl.StringArrayVar(&opts.cidrs, "allow-cidr", nil, "a network (`CIDR` or address) the key may be used from (repeatable; replaces the key's networks)")
	fl.BoolVar(&opts.anyAddress, "any-address", false, "allow the key from any address")
	return cmd
}

func runUpdate(cmd *cobra.Command, opts *updateOptions) error {
	if err := exclusive(cmd, "scope", "no-scopes"); err != nil {
		return err
	}
	if err := exclusive(cmd, "allow-cidr", "any-address"); err != nil {
		return err
	}
	for _, limit := range []string{"rate-per-minute", "rate-per-day"} {
		if err := exclusive(cmd, "default-limits", limit); err != nil {
			return err
		}
	}
	fl := cmd.Flags()
	var in client.UpdateApiKeyInput
	if fl.Changed("name") {
		in.Name = &opts.name
	}
	if opts.defaults {
		// An explicit null clears each limit, in the same mutation as the
		// rest: a refused value leaves the limits too (docs/access.md#editing-a-key).
		var none *int
		in.RateLimitPerMinute, in.RateLimitPerDay = &none, &none
	}
	if opts.perMinute != nil {
		in.RateLimitPerMinute = &opts.perMinute
	}
	if opts.perDay != nil {
		in.RateLimitPerDay = &opts.perDay
	}
	switch {
	case fl.Changed("scope"):
		in.Scopes = &opts.scopes
	case opts.noScopes:
		in.Scopes = &[]string{}
	}
	switch {
	case fl.Changed("allow-cidr"):
		in.AllowedCidrs = &opts.cidrs
	case opts.anyAddress:
		in.AllowedCidrs = &[]string{}
	}
	if in == (client.UpdateApiKeyInput{}) {
		return usageErrorf("nothing to change: give --name, --rate-per-minute, --rate-per-day, --default-limits, --scope, --no-scopes, --allow-cidr or --any-address")
	}
	ctx, p, c, err := opts.f.connect(cmd)
	if err != nil {
		return err
	}
	k, err := client.ResolveKey(ctx, c, opts.key)
	if err != nil {
		return err
	}
	resp, err := client.UpdateApiKey(ctx, c, k.Id, in)
	if err != nil {
		if in.Name != nil {
			return nameTaken(ctx, c, opts.name, err)
		}
		return err
	}
	p.Notice("Updated key %q", resp.UpdateApiKey.Name)
	return p.apiKey(ctx, c, resp.UpdateApiKey)
}
