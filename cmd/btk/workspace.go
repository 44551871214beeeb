package main

import "github.com/spf13/cobra"

func newWorkspaceCmd(f *factory) *cobra.Command {
	return group(&cobra.Command{
		Use:   "workspace",
		Short: "Show, provision and configure workspaces",
		Long: `Provision and configure workspaces. WORKSPACE arguments take an id or a name.
Creating and listing workspaces and changing plans needs a platform admin;
rate limits may also be set by the workspace's owner. Names are looked up among
your own workspaces first, then (platform admin) among all. Workspaces cannot
be deleted.`,
	}, newWorkspaceCreateCmd(f), newWorkspaceListCmd(f), newWorkspaceShowCmd(f), newWorkspaceSetPlanCmd(f), newWorkspaceSetLimitsCmd(f), newWorkspacePolicyCmd(f))
}
