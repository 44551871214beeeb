package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceSetPlanCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "set-plan WORKSPACE PLAN",
		Short: "Change the plan of a workspace",
		Long: `Change the plan of WORKSPACE to PLAN: cloud_starter, cloud_pro,
cloud_enterprise or self_hosted. On cloud_starter no key can be created or
rotated; keys already issued keep working and can still be revoked.`,
		Example:           `  btk workspace set-plan Acme cloud_enterprise`,
		Args:              exactArgs(2),
		ValidArgsFunction: positional(f.completeWorkspaces, completePlans),
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := parsePlan(args[1])
			if err != nil {
				return err
			}
			p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			id, err := client.ResolveWorkspaceID(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			resp, err := client.SetWorkspacePlan(cmd.Context(), c, id, plan)
			if err != nil {
				return err
			}
			return p.Object(resp.SetWorkspacePlan, p.tenantFields(resp.SetWorkspacePlan))
		},
	}
}
