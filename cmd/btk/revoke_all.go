package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type revokeAllOptions struct {
	f   *factory
	yes bool
}

func newRevokeAllCmd(f *factory) *cobra.Command {
	opts := &revokeAllOptions{f: f}
	cmd := &cobra.Command{
		Use:   "revoke-all",
		Short: "Revoke every API key of the workspace (incident response)",
		Long: `Revoke every key of the workspace at once, for incident response: every
service using a key of this workspace is cut off until it gets a new one.

On a terminal btk asks you to type the workspace name; elsewhere --yes is
required.`,
		Example: `  btk revoke-all
  btk revoke-all --yes -o json   # {"revokedCount": 12}`,
		Args: noArgs,
		RunE: f.connectedConfirmable(&opts.yes, "revoke every key", func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			return runRevokeAll(ctx, p, c, opts)
		}),
	}
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func runRevokeAll(ctx context.Context, p *printer, c *client.Client, opts *revokeAllOptions) error {
	f := opts.f
	if !opts.yes {
		info, err := client.TenantInfo(ctx, c)
		if err != nil {
			return err
		}
		name := info.TenantInfo.Name
		answer, err := f.io.prompt(fmt.Sprintf("This revokes EVERY API key of workspace %q at once.\nType the workspace name to confirm: ", name))
		if err != nil {
			return err
		}
		if answer != name {
			return fmt.Errorf("not confirmed: %q is not the workspace name; no key was revoked", answer)
		}
	}
	resp, err := client.RevokeAllApiKeys(ctx, c)
	if err != nil {
		return err
	}
	n := resp.RevokeAllApiKeys.RevokedCount
	return p.Result(resp.RevokeAllApiKeys, strconv.Itoa(n), func() {
		fmt.Fprintf(f.io.Out, "Revoked %d key(s)\n", n)
	})
}
