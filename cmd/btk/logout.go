package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newLogoutCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the session and remove its token from the credentials file",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogout(cmd, f)
		},
	}
}

func runLogout(cmd *cobra.Command, f *factory) error {
	ctx, p, c, err := f.connect(cmd)
	if errors.Is(err, errNotLoggedIn) {
		// Nothing to end: the goal of logout is already met (as docker logout).
		fmt.Fprintln(f.io.ErrOut, "Not logged in; nothing to do")
		return nil
	}
	if err != nil {
		return err
	}
	_, err = client.Logout(ctx, c)
	// A session the server no longer accepts is as good as ended.
	if exitCode(err) == exitAuth {
		err = nil
	}
	if rmErr := updateConfig(f.credPath, nil, keyToken); rmErr != nil {
		return rmErr
	}
	if err != nil {
		return fmt.Errorf("token removed from %s, but the server did not end the session: %w", f.credPath, err)
	}
	p.Notice("Logged out; token removed from %s", f.credPath)
	return nil
}
