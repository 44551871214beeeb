package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newImpersonateCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "impersonate WORKSPACE",
		Short: "Act as owner tier in a workspace (platform admin)",
		Long: `Open a session acting as owner tier in WORKSPACE (an id or a name).
Everything done in it is recorded with you as the impersonator.

By default the new session token replaces the one in the credentials file, like
'btk login' (log in again to return to your own session). With -o json the
session, token included, is printed instead and the credentials file is left as it
is, for use as BTK_TOKEN in a script. With -o plain the session is saved as
by default and what it acts as is printed (workspace, its id, expiry), never
the token. 'btk whoami' says when the session is an impersonation.`,
		Example: `  btk impersonate Acme
  BTK_TOKEN=$(btk impersonate Acme -o json | jq -r .accessToken) btk revoke-all --yes`,
		Args:              exactArgs(1),
		ValidArgsFunction: positional(f.completeWorkspaces),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			id, err := client.ResolveWorkspaceID(ctx, c, args[0])
			if err != nil {
				return err
			}
			resp, err := client.Impersonate(ctx, c, id)
			if err != nil {
				return err
			}
			if p.format == formatJSON {
				return p.JSON(resp.Impersonate)
			}
			server, err := f.server(cmd)
			if err != nil {
				return err
			}
			if err := f.saveSession(server, resp.Impersonate.AccessToken, ""); err != nil {
				return err
			}
			// The saved session it replaces is no longer known to the CLI:
			// end it rather than leave a live token behind for 12 hours.
			if _, err := client.Logout(ctx, c); err != nil {
				p.Notice("could not end the previous session: %v", err)
			}
			return p.session(resp.Impersonate, server, f.credPath)
		},
	}
}
