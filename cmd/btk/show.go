package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newShowCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "show KEY",
		Short: "Show one API key",
		Long: `Show KEY (a key id, or the name of a key that is not revoked): its status,
the rate limits that apply to it (its own, or the workspace's defaults),
expiry, scopes, last use and rotation links. The plaintext is never shown
again.`,
		Example: `  btk show payments-backend
  btk show 6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21 -o json | jq -r .status`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeKeys),
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			k, err := client.ResolveKey(ctx, c, args[0])
			if err != nil {
				return err
			}
			return p.apiKey(ctx, c, k)
		}),
	}
}
