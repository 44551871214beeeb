package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type rotateOptions struct {
	f             *factory
	key           string
	name          string
	expiresIn     string
	expiresAt     string
	noExpiry      bool
	passwordStdin bool
	overlap       bool
}

func newRotateCmd(f *factory) *cobra.Command {
	opts := &rotateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "rotate KEY",
		Short: "Replace an API key with a new one and revoke the old",
		Long: `Rotate KEY (a key id, or the name of a key that is not revoked): in one step the old key is
revoked and a new one issued with the same name, expiry, scopes, networks and
rate limits, unless overridden. The new plaintext is shown once; -o plain prints it
alone, for piping into a secrets manager.

Rotation needs a fresh proof of your password (an elevation). On a terminal
btk asks for the password; elsewhere pass it with --password-stdin, or pass an
elevation token from 'btk elevate' with --elevation-token or BTK_ELEVATION.
Without a terminal and without these, rotate fails at once (exit 2).

--overlap is rotation without downtime: it issues the successor and revokes
nothing. The new key gets the old one's rate limits, scopes, networks and
expiry (unless overridden) and a name of its own, chosen for you: NAME-2, or the next free
NAME-3, NAME-4, … (--name chooses another). Deploy the new key, then revoke
the old one with 'btk revoke'. Like 'btk create', it needs no elevation.`,
		Example: `  # Interactive: asks for your password
  btk rotate payments-backend

  # From a CI job (set -euo pipefail): store the key only once rotate succeeded
  new_key=$(printf '%s' "$BTK_PASSWORD" | btk rotate payments-backend --password-stdin -o plain)
  printf '%s' "$new_key" | vault kv put secret/payments btk_key=-

  # New name and expiry for the new key
  btk rotate 6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21 --name payments-2027 --expires-in 365d

  # Without downtime: a successor beside the old key, then revoke the old one
  btk rotate payments-backend --overlap      # creates payments-backend-2
  btk revoke payments-backend --yes          # once nothing uses it`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeKeys),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.key = args[0]
			if opts.overlap {
				return runRotateOverlap(cmd, opts)
			}
			return runRotate(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.name, "name", "", "a new `name` for the new key")
	fl.StringVar(&opts.expiresIn, "expires-in", "", "the new key expires after this `duration`, such as 90d")
	fl.StringVar(&opts.expiresAt, "expires-at", "", "the new key expires at this RFC 3339 `time`")
	fl.BoolVar(&opts.noExpiry, "no-expiry", false, "the new key never expires")
	fl.BoolVar(&opts.passwordStdin, "password-stdin", false, "read your password from standard input, for the elevation")
	fl.String("elevation-token", "", "elevation `token` from 'btk elevate' (env BTK_ELEVATION)")
	fl.BoolVar(&opts.overlap, "overlap", false, "issue a successor beside the key and revoke nothing (rotation without downtime)")
	bind(f.v, keyElevation, fl.Lookup("elevation-token")) // and BTK_ELEVATION
	return cmd
}

func runRotate(cmd *cobra.Command, opts *rotateOptions) error {
	f := opts.f
	if err := exclusive(cmd, "expires-in", "expires-at", "no-expiry"); err != nil {
		return err
	}
	if err := exclusive(cmd, "password-stdin", "elevation-token"); err != nil {
		return err
	}
	expiresAt, err := parseExpiry(opts.expiresIn, opts.expiresAt, f.now())
	if err != nil {
		return err
	}
	p, err := f.printer(cmd)
	if err != nil {
		return err
	}
	// Decide where the elevation comes from before any request: with no
	// way to get one, fail now rather than wait on standard input.
	elevation := f.v.GetString(keyElevation)
	if opts.passwordStdin {
		elevation = ""
	} else if elevation == "" && !f.io.canPrompt() {
		return usageErrorf("rotate needs your password and there is no terminal to ask for it: pass it on standard input with --password-stdin, or an elevation token with --elevation-token or BTK_ELEVATION")
	}
	c, err := f.client(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	old, err := client.ResolveKey(ctx, c, opts.key)
	if err != nil {
		return err
	}
	if elevation == "" {
		password, err := f.io.password(opts.passwordStdin, fmt.Sprintf("Password (to rotate %q): ", old.Name))
		if err != nil {
			return err
		}
		resp, err := client.Elevate(ctx, c, password)
		if err != nil {
			return err
		}
		elevation = resp.Elevate.Token
	}
	c = c.WithElevation(elevation)

	var rotated client.RotatedApiKey
	if opts.noExpiry {
		resp, err := client.RotateApiKeyNoExpiry(ctx, c, old.Id, optional(opts.name))
		if err != nil {
			return nameTaken(ctx, c, opts.name, err)
		}
		rotated = resp.RotateApiKey
	} else {
		resp, err := client.RotateApiKey(ctx, c, old.Id, client.RotateApiKeyInput{Name: optional(opts.name), ExpiresAt: expiresAt})
		if err != nil {
			return nameTaken(ctx, c, opts.name, err)
		}
		rotated = resp.RotateApiKey
	}
	if p.human() { // -o plain prints the plaintext alone
		p.readDefaults(ctx, c)
	}
	return p.newKey(rotated, rotated.ApiKey, rotated.PlaintextKey,
		fmt.Sprintf("Rotated key %q: the old key %s is revoked", old.Name, old.Id))
}
