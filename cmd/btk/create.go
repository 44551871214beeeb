package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

type createOptions struct {
	f         *factory
	name      string
	perMinute *int
	perDay    *int
	expiresIn string
	expiresAt string
	scopes    []string
	canary    bool
	cidrs     []string
}

func newCreateCmd(f *factory) *cobra.Command {
	opts := &createOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an API key and show its plaintext once",
		Long: `Create a workspace API key named NAME (unique among the workspace's active
keys; an expired key keeps its name until it is revoked). The plaintext key is shown this once and cannot be recovered: store it
in a secrets manager. -o plain prints the key alone, for piping.

Rate limits left out inherit the workspace defaults; a key without an expiry
never expires.

--canary issues a trap (docs/leaks.md): a key that is never accepted and
answers exactly as an unknown key, while every use of it is recorded as an
api_key.canary_used event with the caller's address, user agent and path.`,
		Example: `  btk create payments-backend
  btk create nightly-export --rate-per-minute 60 --expires-in 90d --scope export:read
  btk create office-sync --allow-cidr 192.0.2.0/24 --allow-cidr 2001:db8::/48
  key=$(btk create ci-deploy -o plain) && printf '%s' "$key" | vault kv put secret/ci/btk key=-
  btk create billing -o json | jq -r .plaintextKey
  btk create canary-ci-vars --canary -o plain   # a trap: plant it where nothing should read it`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.name = args[0]
			return runCreate(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.Var(intFlag{&opts.perMinute}, "rate-per-minute", "requests per minute allowed to this key (default: the workspace's)")
	fl.Var(intFlag{&opts.perDay}, "rate-per-day", "requests per day allowed to this key (default: the workspace's)")
	fl.StringVar(&opts.expiresIn, "expires-in", "", "expire after this `duration`, such as 90d or 36h")
	fl.StringVar(&opts.expiresAt, "expires-at", "", "expire at this RFC 3339 `time`")
	fl.StringArrayVar(&opts.scopes, "scope", nil, "a `scope` the key holds (repeatable); a key with scopes may call only what the server's access rules grant them")
	fl.StringArrayVar(&opts.cidrs, "allow-cidr", nil, "a network (`CIDR` or address) the key may be used from (repeatable; default: anywhere)")
	fl.BoolVar(&opts.canary, "canary", false, "issue a canary key: never accepted, every use recorded")
	return cmd
}

func runCreate(cmd *cobra.Command, opts *createOptions) error {
	f := opts.f
	expiresAt, err := parseExpiry(opts.expiresIn, opts.expiresAt, f.now())
	if err != nil {
		return err
	}
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	resp, err := client.CreateApiKey(ctx, c, client.CreateApiKeyInput{
		Name:               opts.name,
		RateLimitPerMinute: opts.perMinute,
		RateLimitPerDay:    opts.perDay,
		ExpiresAt:          expiresAt,
		Scopes:             opts.scopes,
		Canary:             optionalBool(opts.canary),
		AllowedCidrs:       opts.cidrs,
	})
	if err != nil {
		return nameTaken(ctx, c, opts.name, err)
	}
	payload := resp.CreateApiKey
	if p.human() { // -o plain prints the plaintext alone
		p.readDefaults(ctx, c)
	}
	return p.newKey(payload, payload.ApiKey, payload.PlaintextKey, fmt.Sprintf("Created key %q", payload.ApiKey.Name))
}

// nameTaken explains a NAME_TAKEN refusal for name: when the key holding it
// has expired, it must be revoked before its name is free.
func nameTaken(ctx context.Context, c *client.Client, name string, err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != btk.CodeNameTaken {
		return err
	}
	k, rerr := client.ResolveKey(ctx, c, name)
	if rerr != nil {
		return err
	}
	out := *ce
	if k.Status == client.ApiKeyStatusExpired {
		out.Message = fmt.Sprintf("the name %q belongs to an expired key (%s), which keeps its name until it is revoked: run 'btk revoke %s' first, or rotate it with 'btk rotate %s --expires-in 90d'",
			name, k.Id, k.Id, k.Id)
	} else {
		out.Message = fmt.Sprintf("the name %q is already used by an active key (%s)", name, k.Id)
	}
	return &out
}

// newKey shows a key just issued by create or rotate: the mutation's payload
// with -o json, the plaintext alone with -o plain, else the key record and
// the plaintext set apart.
func (p *printer) newKey(payload any, k client.ApiKey, plaintext, notice string) error {
	if !client.IsAPIKey(plaintext) {
		// A script stores what it prints: never an empty or foreign secret.
		return &client.Error{Code: client.CodeBadResponse, Message: "the server's answer holds no API key"}
	}
	return p.Result(payload, plaintext, func() {
		p.Notice("%s", notice)
		p.Fields(p.apiKeyFields(k))
		p.Secret("key", plaintext)
	})
}

// optionalBool is nil for false, so that an unset flag is not sent.
func optionalBool(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}
