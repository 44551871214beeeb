package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type loginOptions struct {
	f             *factory
	email         string
	passwordStdin bool
	workspace     string
}

func newLoginCmd(f *factory) *cobra.Command {
	opts := &loginOptions{f: f}
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in to a btk server and save the session",
		Long: `Log in with an email and password. The server address and the session token
(valid 12 hours) are saved to the config file, readable by you alone (mode 0600).

The password is asked for without echo on a terminal; elsewhere pass it on
standard input with --password-stdin. It is never accepted as a flag.`,
		Example: `  # Interactive
  btk login --server https://btk.example.com

  # In a CI job
  printf '%s' "$BTK_PASSWORD" | btk login --email ci@example.com --password-stdin

  # Into one workspace of several
  btk login --email me@example.com --workspace 0b6f6a4e-8d52-4f6e-9e07-3c1f4d2a9b10`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogin(cmd, opts)
		},
	}
	cmd.Flags().StringVar(&opts.email, "email", "", "account email (asked for on a terminal)")
	cmd.Flags().BoolVar(&opts.passwordStdin, "password-stdin", false, "read the password from standard input")
	cmd.Flags().StringVar(&opts.workspace, "workspace", "", "`ID` of the workspace to act in (default: your only workspace)")
	return cmd
}

func runLogin(cmd *cobra.Command, opts *loginOptions) error {
	f := opts.f
	p, err := f.printer(cmd)
	if err != nil {
		return err
	}
	if opts.workspace != "" && !client.IsID(opts.workspace) {
		return usageErrorf("--workspace takes a workspace id, got %q", opts.workspace)
	}
	if opts.email == "" {
		if !f.io.canPrompt() {
			return usageErrorf("--email is required when standard input is not a terminal")
		}
		if opts.email, err = f.io.prompt("Email: "); err != nil {
			return err
		}
	}
	password, err := f.io.password(opts.passwordStdin, "Password: ")
	if err != nil {
		return err
	}
	c, server, err := f.anonClient(cmd)
	if err != nil {
		return err
	}
	resp, err := client.Login(cmd.Context(), c, opts.email, password, optional(opts.workspace))
	if err != nil {
		return err
	}
	if err := f.saveSession(server, resp.Login.AccessToken); err != nil {
		return err
	}
	return p.session(resp.Login, server, f.cfgPath)
}
