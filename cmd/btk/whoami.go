package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWhoamiCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the account and workspace of the current credential",
		Long: `Show the account and the workspace that the configured credential acts as.
With an API key as the token (BTK_TOKEN=btk_...) only the workspace is shown:
keys identify a workspace, never a user.`,
		Args: noArgs,
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			return runWhoami(ctx, p, c, f)
		}),
	}
}

func runWhoami(ctx context.Context, p *printer, c *client.Client, f *factory) error {
	var out struct {
		Account   *client.Account `json:"account"`
		Workspace *client.Tenant  `json:"workspace"`
	}
	if !client.IsAPIKey(f.v.GetString(keyToken)) {
		me, err := client.Me(ctx, c)
		if err != nil {
			return err
		}
		out.Account = &me.Me
	}
	tenant, err := client.TenantInfo(ctx, c)
	var ce *client.Error
	switch {
	case err == nil:
		out.Workspace = &tenant.TenantInfo
	case out.Account != nil && errors.As(err, &ce) && ce.Status == 0:
		// A session with no workspace (a platform admin with no membership).
	default:
		return err
	}

	if p.format == formatJSON {
		return p.JSON(out)
	}
	var fields []field
	if out.Account != nil {
		fields = append(fields, p.accountFields(*out.Account)...)
	}
	if out.Workspace != nil {
		w := out.Workspace
		fields = append(fields, field{"Workspace", w.Name}, field{"Workspace ID", w.Id}, field{"Plan", string(w.Plan)})
	} else {
		fields = append(fields, field{"Workspace", "none"})
	}
	if a := out.Account; a != nil {
		if a.Impersonating {
			fields = append(fields, field{"Impersonating", "yes: acting as owner tier in this workspace; 'btk login' returns to your own session"})
		}
		if len(a.Memberships) > 1 {
			var ws []string
			for _, m := range a.Memberships {
				ws = append(ws, fmt.Sprintf("%s (%s)", m.WorkspaceName, m.Role))
			}
			fields = append(fields, field{"Workspaces", strings.Join(ws, ", ")})
		}
	}
	fields = append(fields, field{"Server", client.RedactedURL(f.v.GetString(keyServer))})
	p.Fields(fields)
	return nil
}
