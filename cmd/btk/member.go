package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newMemberCmd(f *factory) *cobra.Command {
	return group(&cobra.Command{
		Use:   "member",
		Short: "Manage workspace memberships",
	}, newMemberSetCmd(f), newMemberListCmd(f))
}

func newMemberSetCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "set WORKSPACE ACCOUNT ROLE|none",
		Short: "Give an account a role in a workspace, or remove it",
		Long: `Give ACCOUNT (an account id or email) the role ROLE in WORKSPACE (an id or a name):
owner manages the workspace's API keys, admin reads them, member has no access
to them; none removes the membership. Platform admin, or an owner of the
workspace. The last owner of a workspace is neither demoted nor removed: make
another member owner first.`,
		Example: `  btk member set Acme 3d4f1c2b-5a6e-4f70-8c9d-0e1f2a3b4c5d owner
  btk member set Acme 3d4f1c2b-5a6e-4f70-8c9d-0e1f2a3b4c5d none`,
		Args:              exactArgs(3),
		ValidArgsFunction: positional(f.completeWorkspaces, nil, completeRoles),
		RunE: func(cmd *cobra.Command, args []string) error {
			role, err := parseRole(args[2])
			if err != nil {
				return err
			}
			ctx, p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			ws, err := client.ResolveWorkspaceID(ctx, c, args[0])
			if err != nil {
				return err
			}
			account, err := resolveAccount(ctx, c, args[1], ws)
			if err != nil {
				return err
			}
			resp, err := client.SetMembership(ctx, c, ws, account, role)
			if err != nil {
				return err
			}
			return p.Result(map[string]bool{"setMembership": resp.SetMembership}, strconv.FormatBool(resp.SetMembership), func() {
				what := "removed from the workspace"
				if role != nil {
					what = "now " + string(*role)
				}
				fmt.Fprintf(f.io.Out, "Account %s is %s\n", args[1], what)
			})
		},
	}
}
