package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceCreateCmd(f *factory) *cobra.Command {
	var plan string
	cmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Provision a workspace with its public client key",
		Example: `  btk workspace create Acme --plan cloud_pro`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pl, err := parsePlan(plan)
			if err != nil {
				return err
			}
			ctx, p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			resp, err := client.CreateWorkspace(ctx, c, args[0], pl)
			if err != nil {
				return err
			}
			return p.Object(resp.CreateWorkspace, p.tenantFields(resp.CreateWorkspace))
		},
	}
	cmd.Flags().StringVar(&plan, "plan", "self_hosted", "`plan`: cloud_starter, cloud_pro, cloud_enterprise or self_hosted")
	completeFlag(cmd, "plan", completePlans)
	return cmd
}
