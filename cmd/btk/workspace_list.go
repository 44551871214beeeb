package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceListCmd(f *factory) *cobra.Command {
	return listCommand(f, "List every workspace", listOf(client.Workspaces, (*client.WorkspacesResponse).GetWorkspaces),
		"No workspaces; create one with 'btk workspace create NAME'", (*printer).tenantTable)
}
