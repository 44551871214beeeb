package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// factory gives commands what they share: the streams, the settings (read
// from flags, environment and config file on first use), an output printer
// and a GraphQL client.
type factory struct {
	io      *iostreams
	v       *viper.Viper
	version string
	getenv  func(string) string
	now     func() time.Time

	cfgPath  string // set by load
	credPath string // the login state file, set by load
	saved    savedLogin
	loaded   bool
}

// load reads the config file of cmd's invocation once. Only client
// commands call it, so `btk serve` never depends on the client's config.
func (f *factory) load(cmd *cobra.Command) error {
	if f.loaded {
		return nil
	}
	path, err := configPath(cmd, f.getenv)
	if err != nil {
		return err
	}
	if err := readConfig(f.v, path); err != nil {
		return err
	}
	cred := credentialsPath(cmd, f.getenv, path)
	if f.saved, err = readCredentials(f.v, cred); err != nil {
		return err
	}
	f.cfgPath, f.credPath, f.loaded = path, cred, true
	return nil
}

// server returns the validated server address.
func (f *factory) server(cmd *cobra.Command) (string, error) {
	if err := f.load(cmd); err != nil {
		return "", err
	}
	s := f.v.GetString(keyServer)
	if err := validServer(s); err != nil {
		return "", err
	}
	return client.BaseURL(s), nil
}

// timeout is the --timeout of one request (BTK_TIMEOUT).
func (f *factory) timeout() (time.Duration, error) {
	s := f.v.GetString(keyTimeout)
	if s == "" {
		return 30 * time.Second, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return 0, usageErrorf("--timeout: want a positive duration such as 30s or 2m, got %q", s)
	}
	return d, nil
}

// printer returns the renderer of the chosen --output format.
func (f *factory) printer(cmd *cobra.Command) (*printer, error) {
	if err := f.load(cmd); err != nil {
		return nil, err
	}
	format := f.v.GetString(keyOutput)
	switch format {
	case formatTable, formatJSON, formatPlain:
	default:
		return nil, usageErrorf("invalid output format %q: want table, json or plain", format)
	}
	return newPrinter(f.io, format, f.now), nil
}

// connect returns what most commands start with: the command's context, the
// printer and the client.
func (f *factory) connect(cmd *cobra.Command) (context.Context, *printer, *client.Client, error) {
	p, err := f.printer(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := f.client(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	return cmd.Context(), p, c, nil
}

// connected is the RunE of a command that starts by connecting
// (factory.connect): run gets the context, the printer, the client and the
// arguments.
func (f *factory) connected(run func(ctx context.Context, p *printer, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, p, c, err := f.connect(cmd)
		if err != nil {
			return err
		}
		return run(ctx, p, c, args)
	}
}

// connectedConfirmable is connected for a command that asks for
// confirmation before it acts, unless *yes (--yes): with nobody to ask, it
// fails before connecting (iostreams.confirmable); action is what it does.
func (f *factory) connectedConfirmable(yes *bool, action string, run func(ctx context.Context, p *printer, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	connected := f.connected(run)
	return func(cmd *cobra.Command, args []string) error {
		if err := f.io.confirmable(*yes, action); err != nil {
			return err
		}
		return connected(cmd, args)
	}
}

// client returns a client authenticated with the configured token; without
// one it fails before any request.
func (f *factory) client(cmd *cobra.Command) (*client.Client, error) {
	server, err := f.server(cmd)
	if err != nil {
		return nil, err
	}
	token := f.v.GetString(keyToken)
	if token == "" {
		return nil, errNotLoggedIn
	}
	if f.fromSavedLogin(cmd, token) && !f.saved.forServer(server) {
		owner := "names no server"
		if f.saved.server != "" {
			owner = "is " + client.RedactedURL(f.saved.server) + "'s"
		}
		shown := client.RedactedURL(server)
		return nil, &client.Error{Code: btk.CodeUnauthenticated, Message: fmt.Sprintf(
			"not logged in to %s (the saved session %s): run 'btk login --server %s' or set BTK_TOKEN", shown, owner, shown)}
	}
	return f.newClient(server, token)
}

// fromSavedLogin reports whether token is the credentials file's, not one
// given by --token or BTK_TOKEN.
func (f *factory) fromSavedLogin(cmd *cobra.Command, token string) bool {
	if fl := cmd.Flags().Lookup("token"); fl != nil && fl.Changed || f.getenv("BTK_TOKEN") != "" {
		return false
	}
	return token == f.saved.token
}

// device is the saved device token, for a login to the server that issued
// it; "" for any other.
func (f *factory) device(server string) string {
	if !f.saved.forServer(server) {
		return ""
	}
	return f.saved.device
}

var errNotLoggedIn = &client.Error{Code: btk.CodeUnauthenticated, Message: "not logged in: run 'btk login' or set BTK_TOKEN"}

// anonClient returns a client that sends no credential, for login.
func (f *factory) anonClient(cmd *cobra.Command) (*client.Client, string, error) {
	server, err := f.server(cmd)
	if err != nil {
		return nil, "", err
	}
	c, err := f.newClient(server, "")
	return c, server, err
}

func (f *factory) newClient(server, token string) (*client.Client, error) {
	timeout, err := f.timeout()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: timeout}
	if path := f.v.GetString(keyCACert); path != "" {
		pool, err := caPool(path)
		if err != nil {
			return nil, err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = t
	}
	return client.New(client.Options{
		Server: server, Token: token, UserAgent: "btk/" + f.version,
		HTTPClient: hc,
	}), nil
}

// caPool is the system's trusted certificates and those in the PEM file at
// path (--cacert): a server whose certificate a private CA signed.
func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path) // #nosec G304 -- the CA file the user named (--cacert)
	if err != nil {
		return nil, usageErrorf("--cacert: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageErrorf("--cacert: no PEM certificate in %s", path)
	}
	return pool, nil
}

// saveSession stores server and token in the credentials file, as login
// and impersonate do; never in the config file, which may be the server's.
// The plaintext of an API key never goes there. device, when given, is the
// device token of the login, kept for the next one.
func (f *factory) saveSession(server, token, device string) error {
	if token == "" { // never over a good session
		return &client.Error{Code: client.CodeBadResponse, Message: "the server's answer holds no session token"}
	}
	set := map[string]string{keyServer: server, keyToken: token}
	if device != "" {
		set[keyDevice] = device
	}
	if err := updateConfig(f.credPath, set); err != nil {
		return err
	}
	if f.getenv("BTK_TOKEN") != "" {
		fmt.Fprintln(f.io.ErrOut, "btk: warning: BTK_TOKEN is set and takes precedence over the token saved in", f.credPath)
	}
	return nil
}
