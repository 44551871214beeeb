package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newAccountCmd(f *factory) *cobra.Command {
	return group(&cobra.Command{
		Use:   "account",
		Short: "Manage accounts (platform admin)",
	}, newAccountCreateCmd(f), newAccountListCmd(f), newAccountDisableCmd(f), newAccountEnableCmd(f), newAccountResetPasswordCmd(f))
}

type accountCreateOptions struct {
	f             *factory
	email         string
	platformAdmin bool
	passwordStdin bool
}

func newAccountCreateCmd(f *factory) *cobra.Command {
	opts := &accountCreateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create EMAIL",
		Short: "Create an account",
		Long: `Create an account that logs in with EMAIL and a password of at least 8
characters. The password is asked for twice on a terminal, or read from
standard input with --password-stdin. Give the account a role in a workspace
with 'btk member set'.`,
		Example: `  btk account create ops@example.com
  printf '%s' "$PASSWORD" | btk account create ci@example.com --password-stdin -o json | jq -r .id`,
		Args: exactArgs(1),
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			opts.email = args[0]
			return runAccountCreate(ctx, p, c, opts)
		}),
	}
	cmd.Flags().BoolVar(&opts.platformAdmin, "platform-admin", false, "the account may operate every workspace")
	cmd.Flags().BoolVar(&opts.passwordStdin, "password-stdin", false, "read the password from standard input")
	return cmd
}

func runAccountCreate(ctx context.Context, p *printer, c *client.Client, opts *accountCreateOptions) error {
	f := opts.f
	password, err := f.io.newPassword(opts.passwordStdin, "Password for "+opts.email+": ", "Repeat the password: ")
	if err != nil {
		return err
	}
	resp, err := client.CreateAccount(ctx, c, opts.email, password, opts.platformAdmin)
	if err != nil {
		return err
	}
	return p.Object(resp.CreateAccount, p.accountFields(resp.CreateAccount))
}
