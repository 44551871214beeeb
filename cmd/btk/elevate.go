package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newElevateCmd(f *factory) *cobra.Command {
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "elevate",
		Short: "Re-enter your password for a 5-minute elevation token",
		Long: `Print an elevation token: proof that you re-entered your password, valid for
5 minutes and for the current session only. 'btk rotate' takes it from
--elevation-token or BTK_ELEVATION, so that several keys can be rotated with
one password entry. 'btk rotate' can also ask for the password itself.`,
		Example: `  export BTK_ELEVATION=$(printf '%s' "$BTK_PASSWORD" | btk elevate --password-stdin -o plain)
  btk rotate payments -o plain > payments.key
  btk rotate billing -o plain > billing.key`,
		Args: noArgs,
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			password, err := f.io.password(passwordStdin, "Password: ")
			if err != nil {
				return err
			}
			resp, err := client.Elevate(ctx, c, password)
			if err != nil {
				return err
			}
			e := resp.Elevate
			return p.Result(e, e.Token, func() {
				p.Fields([]field{{"Token", e.Token}, {"Expires", p.Time(&e.ExpiresAt, "")}})
			})
		}),
	}
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from standard input")
	return cmd
}
