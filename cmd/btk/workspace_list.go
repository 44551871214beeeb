package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceListCmd(f *factory) *cobra.Command {
	return listCommand(f, "List every workspace", func(ctx context.Context, c *client.Client) ([]client.Tenant, error) {
		resp, err := client.Workspaces(ctx, c)
		return resp.Workspaces, err
	}, "No workspaces; create one with 'btk workspace create NAME'", (*printer).tenantTable)
}
