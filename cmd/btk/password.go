package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type passwordOptions struct {
	f             *factory
	passwordStdin bool
}

func newPasswordCmd(f *factory) *cobra.Command {
	opts := &passwordOptions{f: f}
	cmd := &cobra.Command{
		Use:   "password",
		Short: "Change your password (ends your other sessions)",
		Long: `Change the password of the account you are logged in as. Every other session
of the account ends at once (other terminals, the dashboard, impersonation);
this one stays. On a terminal the current password is asked for, then the new
one twice; with --password-stdin standard input holds two lines: the current
password, then the new one.`,
		Example: `  btk password
  printf '%s\n%s\n' "$OLD_PASSWORD" "$NEW_PASSWORD" | btk password --password-stdin`,
		Args: noArgs,
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			return runPassword(ctx, p, c, opts)
		}),
	}
	cmd.Flags().BoolVar(&opts.passwordStdin, "password-stdin", false, "read the current and the new password, one a line, from standard input")
	return cmd
}

func runPassword(ctx context.Context, p *printer, c *client.Client, opts *passwordOptions) error {
	f := opts.f
	current, newPassword, err := readPasswordChange(f.io, opts.passwordStdin)
	if err != nil {
		return err
	}
	if _, err := client.ChangePassword(ctx, c, current, newPassword); err != nil {
		return err
	}
	if p.format == formatJSON {
		return p.JSON(map[string]bool{"changePassword": true})
	}
	fmt.Fprintln(f.io.Out, "Password changed; your other sessions have ended.")
	return nil
}

// readPasswordChange reads the current and the new password: two lines of
// standard input with --password-stdin, else prompts (the new one twice).
func readPasswordChange(io *iostreams, fromStdin bool) (current, newPassword string, err error) {
	if fromStdin {
		all, err := io.readStdinSecret()
		if err != nil {
			return "", "", err
		}
		lines := strings.Split(strings.ReplaceAll(all, "\r\n", "\n"), "\n")
		if len(lines) != 2 || lines[0] == "" || lines[1] == "" {
			return "", "", usageErrorf("--password-stdin: give two lines, the current password and the new one")
		}
		return lines[0], lines[1], nil
	}
	if current, err = io.password(false, "Current password: "); err != nil {
		return "", "", err
	}
	if newPassword, err = io.newPassword(false, "New password: ", "Repeat the new password: "); err != nil {
		return "", "", err
	}
	return current, newPassword, nil
}
