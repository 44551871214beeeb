package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

const longDisable = `Disable an account, named by its email or id: it cannot log in any more, and
all its sessions, impersonation included, end at once (the next request with
an old token is refused). API keys belong to workspaces, not accounts: they
keep working; revoke them separately if they may have leaked. Platform admin;
not your own account. 'btk account enable' lets the account log in again.`

// accountRef splits an EMAIL|ID argument: an id (a UUID) or else an email.
func accountRef(ref string) (id, email string) {
	if client.IsID(ref) {
		return ref, ""
	}
	return "", ref
}

// accountStateFields is the key/value block of a disabled or enabled account.
func (p *printer) accountStateFields(a client.AccountState) []field {
	state := "enabled"
	if a.Disabled {
		state = "disabled"
	}
	return []field{{"Email", a.Email}, {"ID", a.Id}, {"State", state}}
}

func newAccountDisableCmd(f *factory) *cobra.Command {
	return newAccountStateCmd(f, "disable", "Disable an account", longDisable,
		func(ctx context.Context, c *client.Client, id, email string) (client.AccountState, error) {
			resp, err := client.DisableAccount(ctx, c, id, email)
			return resp.DisableAccount, err
		})
}

// newAccountStateCmd is 'btk account disable' or 'enable' (verb): both name
// an account by EMAIL|ID, change its state with set, and print the result.
func newAccountStateCmd(f *factory, verb, short, long string, set func(ctx context.Context, c *client.Client, id, email string) (client.AccountState, error)) *cobra.Command {
	return &cobra.Command{
		Use:     verb + " EMAIL|ID",
		Short:   short,
		Long:    long,
		Example: "  btk account " + verb + " mallory@example.com",
		Args:    exactArgs(1),
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			id, email := accountRef(args[0])
			a, err := set(ctx, c, id, email)
			if err != nil {
				return err
			}
			return p.Object(a, p.accountStateFields(a))
		}),
	}
}
