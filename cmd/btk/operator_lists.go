package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

func newAccountListCmd(f *factory) *cobra.Command {
	return listCommand(f, "List every account (platform admin)", listOf(client.Accounts, (*client.AccountsResponse).GetAccounts),
		"No accounts", (*printer).accountTable)
}

func newMemberListCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "list [WORKSPACE]",
		Short: "List the members of a workspace",
		Long: `List the accounts with a role in WORKSPACE (a name or an id; default: the
session's workspace). A platform admin, or an owner or admin of the workspace.`,
		Example:           "  btk member list\n  btk member list Acme -o json",
		Aliases:           []string{"ls"},
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: positional(f.completeWorkspaces),
		RunE: onWorkspaceArg(f, func(ctx context.Context, p *printer, c *client.Client, ws client.Tenant) error {
			resp, err := client.Members(ctx, c, ws.Id)
			if err != nil {
				return err
			}
			return printList(p, resp.Members, "No members; add one with 'btk member set'", p.memberTable)
		}),
	}
}

func newWorkspaceShowCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "show [WORKSPACE]",
		Short: "Show a workspace",
		Long: `Show WORKSPACE (a name or an id; default: the session's workspace): its plan,
public client key and the default rate limits of its keys. Your own workspace
with any role; any workspace for a platform admin.`,
		Example:           "  btk workspace show\n  btk workspace show Acme -o json",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: positional(f.completeWorkspaces),
		RunE: onWorkspaceArg(f, func(_ context.Context, p *printer, _ *client.Client, ws client.Tenant) error {
			return p.Object(ws, p.tenantFields(ws))
		}),
	}
}

// onWorkspaceArg is the RunE of a command about the workspace its optional
// WORKSPACE argument names: it connects, reads that workspace (readWorkspace)
// and hands it to run.
func onWorkspaceArg(f *factory, run func(ctx context.Context, p *printer, c *client.Client, ws client.Tenant) error) func(*cobra.Command, []string) error {
	return f.connected(func(ctx context.Context, p *printer, c *client.Client, args []string) error {
		ref := ""
		if len(args) > 0 {
			ref = args[0]
		}
		ws, err := readWorkspace(ctx, c, ref)
		if err != nil {
			return err
		}
		return run(ctx, p, c, ws)
	})
}

// readWorkspace reads the workspace ref names (a name or an id): the
// session's own (tenantInfo) when ref is "" or names that one, else from the
// workspaces list (platform admin).
func readWorkspace(ctx context.Context, c *client.Client, ref string) (client.Tenant, error) {
	own, ownErr := client.TenantInfo(ctx, c)
	if ref == "" {
		if ownErr != nil {
			return client.Tenant{}, ownErr
		}
		return own.TenantInfo, nil
	}
	id, err := client.ResolveWorkspaceID(ctx, c, ref)
	if err != nil {
		return client.Tenant{}, err
	}
	if ownErr == nil && own.TenantInfo.Id == id {
		return own.TenantInfo, nil
	}
	resp, err := client.Workspaces(ctx, c)
	if err != nil {
		var ce *client.Error
		if asClientError(err, &ce) && ce.Code == btk.CodeForbidden {
			// Not a platform admin: only the session's workspace can be read.
			return client.Tenant{}, &client.Error{Code: btk.CodeForbidden, Message: fmt.Sprintf(
				"only your session's workspace can be shown: log in to %s with 'btk login --workspace %s'", ref, ref)}
		}
		return client.Tenant{}, err
	}
	for _, w := range resp.Workspaces {
		if w.Id == id {
			return w, nil
		}
	}
	return client.Tenant{}, &client.Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no workspace %q", ref)}
}

// resolveAccount takes an account id, or an email looked up with the
// accounts query (platform admin), else among the workspace's members (so
// that an owner can change a member's role by email).
func resolveAccount(ctx context.Context, c *client.Client, ref, workspaceID string) (string, error) {
	if client.IsID(ref) {
		return ref, nil
	}
	if !strings.Contains(ref, "@") {
		return "", usageErrorf("ACCOUNT takes an account id or an email, got %q", ref)
	}
	resp, err := client.Accounts(ctx, c)
	if err != nil {
		var ce *client.Error
		if !asClientError(err, &ce) || ce.Code != btk.CodeForbidden {
			return "", err
		}
		members, merr := client.Members(ctx, c, workspaceID)
		if merr == nil {
			for _, m := range members.Members {
				if strings.EqualFold(m.Email, ref) {
					return m.AccountId, nil
				}
			}
		}
		return "", usageErrorf("%s is not a member of the workspace, and only a platform admin can look other accounts up by email: pass the account id", ref)
	}
	for _, a := range resp.Accounts {
		if strings.EqualFold(a.Email, ref) {
			return a.Id, nil
		}
	}
	return "", &client.Error{Code: btk.CodeNotFound, Message: fmt.Sprintf("no account with email %q", ref)}
}
