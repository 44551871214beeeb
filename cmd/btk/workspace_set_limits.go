package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspaceSetLimitsCmd(f *factory) *cobra.Command {
	var perMinute, perDay *int
	cmd := &cobra.Command{
		Use:   "set-limits WORKSPACE",
		Short: "Set the default rate limits of a workspace's keys",
		Long: `Set the default rate limits that WORKSPACE's keys get when they have no
override of their own. Both windows are set on every call: a flag left out
puts that window back to the server's default (600/min and 100000/day unless
the server is configured otherwise). Platform admin or the workspace's owner.`,
		Example: `  btk workspace set-limits Acme --per-minute 1200 --per-day 500000
  btk workspace set-limits Acme    # both back to the server defaults`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeWorkspaces),
		RunE: func(cmd *cobra.Command, args []string) error {
			return changeWorkspace(cmd, f, args[0], func(ctx context.Context, c *client.Client, id string) (client.Tenant, error) {
				resp, err := client.SetWorkspaceRateLimits(ctx, c, id, perMinute, perDay)
				return resp.SetWorkspaceRateLimits, err
			})
		},
	}
	cmd.Flags().Var(intFlag{&perMinute}, "per-minute", "requests per minute (left out: the server default)")
	cmd.Flags().Var(intFlag{&perDay}, "per-day", "requests per day (left out: the server default)")
	return cmd
}
