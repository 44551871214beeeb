package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

const longEnable = `Let a disabled account, named by its email or id, log in again. Its old
sessions stay ended. Platform admin.`

func newAccountEnableCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:     "enable EMAIL|ID",
		Short:   "Enable an account",
		Long:    longEnable,
		Example: "  btk account enable mallory@example.com",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			id, email := accountRef(args[0])
			resp, err := client.EnableAccount(cmd.Context(), c, id, email)
			if err != nil {
				return err
			}
			a := resp.EnableAccount
			return p.Object(a, p.accountStateFields(a))
		},
	}
}
