package main

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
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
(valid 12 hours) are saved to the credentials file, readable by you alone (mode
0600): $XDG_CONFIG_HOME/btk/credentials.yaml, or BTK_CREDENTIALS. The config
file (--config), which may be the server's, is never written.

The password is asked for without echo on a terminal; elsewhere pass it on
standard input with --password-stdin (at most 64 KiB: more is refused before
btk connects). It is never accepted as a flag. To an
http:// server on another machine, login warns on standard error that the
password and the session cross the network unencrypted.

An account in several workspaces chooses one with --workspace (a name or an
id); without it, btk lists them and asks on a terminal.`,
		Example: `  # Interactive
  btk login --server https://btk.example.com

  # In a CI job
  printf '%s' "$BTK_PASSWORD" | btk login --email ci@example.com --password-stdin

  # Into one workspace of several (a name or an id); on a terminal btk asks
  btk login --email me@example.com --workspace Acme`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogin(cmd, opts)
		},
	}
	cmd.Flags().StringVar(&opts.email, "email", "", "account email (asked for on a terminal)")
	cmd.Flags().BoolVar(&opts.passwordStdin, "password-stdin", false, "read the password from standard input")
	cmd.Flags().StringVar(&opts.workspace, "workspace", "", "`workspace` (name or id) to act in (default: your only workspace; asked on a terminal when you have several)")
	return cmd
}

func runLogin(cmd *cobra.Command, opts *loginOptions) error {
	f := opts.f
	p, err := f.printer(cmd)
	if err != nil {
		return err
	}
	if opts.email == "" && !f.io.canPrompt() {
		return usageErrorf("--email is required when standard input is not a terminal")
	}
	if !opts.passwordStdin && !f.io.canPrompt() {
		return usageErrorf("no terminal to ask for the password: pass it on standard input with --password-stdin")
	}
	// A password piped in is read, and refused when too long
	// (readStdinSecret), before any connection; unless the email is still to
	// be typed on the same terminal first.
	var password string
	if opts.passwordStdin && opts.email != "" {
		if password, err = f.io.readStdinSecret(); err != nil {
			return err
		}
	}
	c, server, err := f.anonClient(cmd)
	if err != nil {
		return err
	}
	// A server that does not answer is said before anyone types a password.
	if err := c.Ping(cmd.Context()); err != nil {
		return err
	}
	if plainHTTPElsewhere(server) {
		fmt.Fprintf(f.io.ErrOut, "btk: warning: %s is plain HTTP: the password and the session token cross the network unencrypted; use https://\n",
			client.RedactedURL(server))
	}
	if opts.email == "" {
		if opts.email, err = f.io.prompt("Email: "); err != nil {
			return err
		}
	}
	if password == "" {
		if password, err = f.io.password(opts.passwordStdin, "Password: "); err != nil {
			return err
		}
	}
	// --workspace is an id or a name; the server resolves a name among the
	// account's memberships.
	var id, name *string
	if client.IsID(opts.workspace) {
		id = optional(opts.workspace)
	} else {
		name = optional(opts.workspace)
	}
	ctx := cmd.Context()
	// The device token of an earlier login (credentials key "device") keeps this
	// client out of the account-wide failure budget (docs/security.md).
	device := optional(f.device(server))
	resp, err := client.Login(ctx, c, opts.email, password, id, name, device)
	if choices := workspaceChoices(err); choices != nil {
		// Several workspaces and none named: ask on a terminal, else say how
		// to choose.
		if !f.io.canPrompt() || opts.passwordStdin {
			return usageErrorf("the account belongs to several workspaces: choose one with --workspace NAME (%s)", choiceNames(choices))
		}
		chosen, err := chooseWorkspace(f.io, choices)
		if err != nil {
			return err
		}
		resp, err = client.Login(ctx, c, opts.email, password, &chosen, nil, device)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := f.saveSession(server, resp.Login.AccessToken, deref(resp.Login.DeviceToken, "")); err != nil {
		return err
	}
	return p.session(resp.Login, server, f.credPath)
}

// choice is one workspace a login may choose, from the server's
// "several workspaces" error (extensions.workspaces).
type choice struct{ id, name, role string }

func workspaceChoices(err error) []choice {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != btk.CodeBadUserInput {
		return nil
	}
	list, _ := ce.Extensions["workspaces"].([]any)
	var out []choice
	for _, item := range list {
		m, _ := item.(map[string]any)
		id, _ := m["workspaceId"].(string)
		name, _ := m["workspaceName"].(string)
		role, _ := m["role"].(string)
		if id != "" {
			out = append(out, choice{id, name, role})
		}
	}
	return out
}

func choiceNames(cs []choice) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// chooseWorkspace asks which workspace to log in to, by number or name.
func chooseWorkspace(io *iostreams, cs []choice) (string, error) {
	fmt.Fprintln(io.ErrOut, "The account belongs to several workspaces:")
	for i, c := range cs {
		fmt.Fprintf(io.ErrOut, "  %d) %s (%s)\n", i+1, c.name, c.role)
	}
	for range 3 {
		answer, err := io.prompt(fmt.Sprintf("Workspace [1-%d]: ", len(cs)))
		if err != nil {
			return "", err
		}
		if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(cs) {
			return cs[n-1].id, nil
		}
		for _, c := range cs {
			if c.name == answer || c.id == answer {
				return c.id, nil
			}
		}
		fmt.Fprintf(io.ErrOut, "Answer with a number from 1 to %d, or a workspace name.\n", len(cs))
	}
	return "", usageErrorf("no workspace chosen")
}

// plainHTTPElsewhere reports whether server is an http:// address of another
// machine: a password sent there can be read on the way.
func plainHTTPElsewhere(server string) bool {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}
