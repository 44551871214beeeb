package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

const longEnable = `Let a disabled account, named by its email or id, log in again. Its old
sessions stay ended. Platform admin.`

func newAccountEnableCmd(f *factory) *cobra.Command {
	return newAccountStateCmd(f, "enable", "Enable an account", longEnable,
		func(ctx context.Context, c *client.Client, id, email string) (client.AccountState, error) {
			resp, err := client.EnableAccount(ctx, c, id, email)
			return resp.EnableAccount, err
		})
}
