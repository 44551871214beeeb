package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newListCmd(f *factory) *cobra.Command {
	var all bool
	cmd := listCommand(f, "List the workspace's API keys", func(ctx context.Context, c *client.Client) ([]client.ApiKey, error) {
		return client.AllApiKeys(ctx, c, all)
	}, "No API keys; create one with 'btk create NAME'", (*printer).apiKeyTable)
	cmd.Long = `List the workspace's API keys, newest first: every key not revoked (active
and expired), or with --all the revoked ones too. The plaintext of a key is
never shown again; KEY is its display prefix and the last 4 characters.`
	cmd.Example = `  btk list
  btk list --all -o json | jq -r '.[] | select(.status == "EXPIRED") | .name'
  btk list -o plain | cut -f1`
	cmd.Flags().BoolVar(&all, "all", false, "include revoked keys")
	return cmd
}
