package main

import (
	"context"

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
			return changeWorkspace(cmd, f, args[0], func(ctx context.Context, c *client.Client, id string) (client.Tenant, error) {
				resp, err := client.SetWorkspacePlan(ctx, c, id, plan)
				return resp.SetWorkspacePlan, err
			})
		},
	}
}

// changeWorkspace connects, resolves the workspace ref names (a name or an
// id), applies change to it and prints the workspace as it is after: the
// shape of the workspace set-* commands.
func changeWorkspace(cmd *cobra.Command, f *factory, ref string, change func(ctx context.Context, c *client.Client, id string) (client.Tenant, error)) error {
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	id, err := client.ResolveWorkspaceID(ctx, c, ref)
	if err != nil {
		return err
	}
	ws, err := change(ctx, c, id)
	if err != nil {
		return err
	}
	return p.Object(ws, p.tenantFields(ws))
}
