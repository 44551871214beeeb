package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceListCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List every workspace",
		Aliases: []string{"ls"},
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			resp, err := client.Workspaces(cmd.Context(), c)
			if err != nil {
				return err
			}
			if p.format == formatJSON {
				return p.JSON(resp.Workspaces)
			}
			p.tenantTable(resp.Workspaces)
			return nil
		},
	}
}
