package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
	"github.com/btk-project/btk/internal/store"
)

// #nosec G101 -- help text that mentions a password, not one
const longResetPassword = `Set a new password for the account EMAIL directly in the database, end all
its sessions, and record account.password_changed attributed to "system": the
operator's way back in when no one can log in (a forgotten password, the only
platform admin locked out). It runs on the server host and talks to no
server: --db (BTK_DB) is the database btk serve uses, a SQLite file or a
postgres:// URL; it may run while btk serve does. The password is asked for twice on a
terminal, or read from standard input with --password-stdin.`

func newAccountResetPasswordCmd(f *factory) *cobra.Command {
	// Its own viper: --db here must not take over serve's binding of "db".
	v := viper.New()
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "reset-password EMAIL",
		Short: "Set an account's password in the database (on the server host)",
		Long:  longResetPassword,
		Example: `  btk account reset-password admin@example.com --db /var/lib/btk/btk.db
  printf '%s' "$PASSWORD" | btk account reset-password admin@example.com --db "$BTK_DB" --password-stdin`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db := v.GetString("db")
			if err := store.CheckDB(db); err != nil {
				return usageErrorf("--db: %v", err)
			}
			password, err := f.io.newPassword(passwordStdin, "New password for "+args[0]+": ", "Repeat the password: ")
			if err != nil {
				return err
			}
			acct, err := resetPassword(cmd.Context(), db, args[0], password)
			if err != nil {
				return err
			}
			p, err := f.printer(cmd)
			if err != nil {
				return err
			}
			p.Notice("btk: set the password of %s and ended its sessions", acct.Email)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.String("db", "./btk.db", "SQLite database file or postgres:// URL of the server (BTK_DB)")
	fl.BoolVar(&passwordStdin, "password-stdin", false, "read the password from standard input")
	bind(v, "db", fl.Lookup("db"))
	return cmd
}

// resetPassword opens the database beside any running server (it caches
// nothing, and the server reads passwords and sessions from the database on
// every request), and resets.
func resetPassword(ctx context.Context, dbURL, email, password string) (*btk.Account, error) {
	db, err := store.OpenBeside(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	svc, err := btk.NewService(ctx, db, nil, btk.Config{})
	if err != nil {
		return nil, err
	}
	acct, err := svc.ResetPassword(ctx, email, password)
	if err != nil {
		// The domain's codes decide the exit code as the server's would.
		var be *btk.Error
		if errors.As(err, &be) {
			msg := be.Message
			if be.Code == btk.CodeNotFound {
				msg = fmt.Sprintf("no account with the email %s", email)
			}
			return nil, &client.Error{Code: be.Code, Message: msg}
		}
		return nil, err
	}
	return acct, nil
}
