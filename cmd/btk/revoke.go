package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

type revokeOptions struct {
	f   *factory
	key string
	yes bool
}

func newRevokeCmd(f *factory) *cobra.Command {
	opts := &revokeOptions{f: f}
	cmd := &cobra.Command{
		Use:   "revoke KEY",
		Short: "Revoke an API key at once",
		Long: `Revoke KEY (a key id, or a key's name). Every later request with
it is rejected. There is no undo: create a new key instead. Revoking works on
every plan.

A name is the key of that name that is not revoked (active or expired), or
else the newest revoked key of that name: revoking it again changes nothing
and exits 0, so a script may repeat the command after exit 10 (UNAVAILABLE:
the revocation is stored, the other instances were maybe not told yet), and
the repeat tells them (docs/clusters.md#shared-state-in-redis).

KEY "-" reads the plaintext key itself from standard input (typed without
echo on a terminal, or piped: any text holding one key): it is hashed here and
found by its hash, so a leaked key is revoked without ever being an argument
(docs/leaks.md).

On a terminal btk asks for confirmation; elsewhere --yes is required.`,
		Example: `  btk revoke payments-backend
  btk revoke 6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21 --yes
  btk revoke leaked-key --yes -o json
  pbpaste | btk revoke - --yes               # the leaked key itself, from the clipboard`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeKeys),
		RunE: f.connectedConfirmable(&opts.yes, "revoke", func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			opts.key = args[0]
			return runRevoke(ctx, p, c, opts)
		}),
	}
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func runRevoke(ctx context.Context, p *printer, c *client.Client, opts *revokeOptions) error {
	f := opts.f
	var (
		k         client.ApiKey
		workspace *client.ApiKeyByHashApiKeyByHashApiKeyWorkspaceTenant
		err       error
	)
	if opts.key == "-" {
		found, err := keyOnInput(ctx, f.io, c)
		if err != nil {
			return err
		}
		k, workspace = found.ApiKey, found.Workspace
	} else if k, err = client.ResolveKeyForAudit(ctx, c, opts.key); err != nil {
		return err
	}
	again := k.Status == client.ApiKeyStatusRevoked
	if !opts.yes && !again { // on a terminal: nothing to confirm for a revoked key
		err := f.io.confirm(fmt.Sprintf("Revoke key %q (%s)? Requests with it will fail at once; this cannot be undone.", k.Name, keyDisplay(k)),
			fmt.Sprintf("key %q was not revoked", k.Name))
		if err != nil {
			return err
		}
	}
	resp, err := client.RevokeApiKey(ctx, c, k.Id)
	if err != nil {
		if ce := (*client.Error)(nil); workspace != nil && errors.As(err, &ce) && ce.Code == btk.CodeNotFound {
			// A platform admin found another workspace's key by its hash.
			return fmt.Errorf("key %q belongs to workspace %q (%s): revoke it there ('btk impersonate %s', then 'btk revoke %s'): %w",
				k.Name, workspace.Name, workspace.Id, workspace.Id, k.Id, err)
		}
		if ce := (*client.Error)(nil); errors.As(err, &ce) && ce.Code == btk.CodeUnavailable {
			// The revocation may be stored already: the repeat finds the
			// key by this id (or by its name, above) and tells again.
			return fmt.Errorf("key %q (%s) may be revoked but not every instance told: repeat 'btk revoke %s --yes' (every instance is told within a minute anyway): %w",
				k.Name, k.Id, k.Id, err)
		}
		return err
	}
	revoked := resp.RevokeApiKey
	if again {
		p.Notice("Key %q was revoked already", revoked.Name)
		return p.apiKey(ctx, c, revoked)
	}
	p.Notice("Revoked key %q", revoked.Name)
	return p.apiKey(ctx, c, revoked)
}
