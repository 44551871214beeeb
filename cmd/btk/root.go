package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/btk-project/btk/internal/hangup"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// run executes the btk command line and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runWith(ctx, args, systemStreams(stdin, stdout, stderr))
}

// runWith is run with given streams, so tests can pose as a terminal.
func runWith(ctx context.Context, args []string, streams *iostreams) int {
	v := viper.New()
	streams.done = ctx.Done()
	f := &factory{io: streams, v: v, version: buildVersion(), getenv: os.Getenv, now: time.Now}
	root := newCommandTree(f)
	if c, _, err := root.Find(args); err != nil || c.Name() != "serve" || c.Parent() != root {
		// Only serve reloads on SIGHUP (caught since the process started):
		// to any other command it is a hangup, as to any program.
		hangup.Release()
	}
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	cmd, err := root.ExecuteContextC(ctx)
	var loss *stopLossError
	if err != nil && ctx.Err() != nil && !errors.As(err, &loss) {
		// Ctrl-C (or SIGTERM) at a prompt or during a request.
		fmt.Fprintln(streams.ErrOut, "btk: interrupted")
		return exitInterrupted
	}
	if err == nil {
		err = streams.outErr()
	}
	if err != nil {
		err = asUsage(err)
		printError(streams.ErrOut, cmd, hint(err))
	}
	return exitCode(err)
}

// newCommandTree is every command of btk: the client commands and the
// server's (serve reads its own typed configuration, serve_config.go). The
// CLI reference in docs/cli is generated from it (clidocs_test.go).
func newCommandTree(f *factory) *cobra.Command {
	root := newRootCmd(f)
	serve := newServeCmd()
	serve.GroupID = "server"
	root.AddCommand(serve)
	backup := newBackupCmd(f)
	backup.GroupID = "server"
	root.AddCommand(backup)
	return root
}

func newRootCmd(f *factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "btk",
		Short: "Workspace API keys: the btk server and its client",
		Long: `btk runs the workspace API key service (btk serve) and is its client.

Log in once with 'btk login'; the server address and session token are kept in
the credentials file ($XDG_CONFIG_HOME/btk/credentials.yaml), apart from the
config file. Data goes to standard output, messages and errors to standard
error. Exit codes: 0 ok, 1 other failure, 2 usage, 3 not authenticated,
4 forbidden (role, elevation or plan), 5 not found, 6 conflict (name taken,
key revoked), 7 rate limited, 8 server unreachable, 9 'btk scan' found keys,
10 server unavailable (busy database or Redis: retry later), 130 interrupted
(Ctrl-C).`,
		Version:       f.version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("btk {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	bindGlobalFlags(root, f.v)

	root.AddGroup(
		&cobra.Group{ID: "keys", Title: "API key commands:"},
		&cobra.Group{ID: "session", Title: "Session commands:"},
		&cobra.Group{ID: "operator", Title: "Operator commands:"},
		&cobra.Group{ID: "server", Title: "Server commands:"},
	)
	for _, c := range []*cobra.Command{newCreateCmd(f), newListCmd(f), newShowCmd(f), newRotateCmd(f), newRevokeCmd(f), newUpdateCmd(f), newRevokeAllCmd(f), newAuditCmd(f), newEventsCmd(f), newWhoisCmd(f), newScanCmd(f), newUsageCmd(f), newWebhookCmd(f)} {
		c.GroupID = "keys"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newLoginCmd(f), newLogoutCmd(f), newWhoamiCmd(f), newElevateCmd(f), newPasswordCmd(f)} {
		c.GroupID = "session"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newWorkspaceCmd(f), newAccountCmd(f), newMemberCmd(f), newImpersonateCmd(f)} {
		c.GroupID = "operator"
		root.AddCommand(c)
	}
	root.AddCommand(newVersionCmd(f))
	return root
}
