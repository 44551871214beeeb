package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// Settings of the client commands. Each is a flag, a BTK_* variable and a key
// of the config file; viper applies the order flag > env > file > default.
const (
	keyServer    = "server"
	keyToken     = "token"
	keyOutput    = "output"
	keyElevation = "elevation" // rotate --elevation-token, BTK_ELEVATION
	keyTimeout   = "timeout"
	keyCACert    = "cacert"
	// keyDevice is the device token of the latest login (credentials file only).
	keyDevice = "device"

	defaultServer = "http://127.0.0.1:8080"
)

// bindGlobalFlags declares the global flags on root and binds them, and their
// environment variables, to v.
func bindGlobalFlags(root *cobra.Command, v *viper.Viper) {
	pf := root.PersistentFlags()
	pf.String("server", defaultServer, "address of the btk server (env BTK_SERVER)")
	pf.String("token", "", "session token or API key to authenticate with (env BTK_TOKEN)")
	pf.StringP("output", "o", "table", "output format: table, json or plain (env BTK_OUTPUT)")
	pf.String("config", "", "config file (env BTK_CONFIG; default $XDG_CONFIG_HOME/btk/config.yaml)")
	// bind also binds BTK_<KEY>.
	bind(v, keyServer, pf.Lookup("server"))
	bind(v, keyToken, pf.Lookup("token"))
	bind(v, keyOutput, pf.Lookup("output"))
	pf.String("timeout", "30s", "give up on a request after this `duration` (env BTK_TIMEOUT)")
	bind(v, keyTimeout, pf.Lookup("timeout"))
	pf.String("cacert", "", "also trust the CA certificate(s) in this PEM `file`, for a server with a private CA (env BTK_CACERT; SSL_CERT_FILE replaces the system's)")
	bind(v, keyCACert, pf.Lookup("cacert"))
	completeFlag(root, "output", fixedCompletion(formatTable, formatJSON, formatPlain))
}

// configPath is where the config file is: --config, BTK_CONFIG, or
// $XDG_CONFIG_HOME/btk/config.yaml falling back to ~/.config/btk/config.yaml.
func configPath(cmd *cobra.Command, getenv func(string) string) (string, error) {
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		return f.Value.String(), nil
	}
	if p := getenv("BTK_CONFIG"); p != "" {
		return p, nil
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", fmt.Errorf("cannot find the config file: set --config or XDG_CONFIG_HOME: %w", err)
			}
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "btk", "config.yaml"), nil
}

// credentialsPath is the CLI's login state file: BTK_CREDENTIALS; else,
// beside a config file named by --config or BTK_CONFIG, that file's name
// with .credentials.yaml in place of .yaml (two.yaml: two.credentials.yaml),
// so that each config file keeps its own session; else
// $XDG_CONFIG_HOME/btk/credentials.yaml. It is apart from the config file,
// which may be the server's: `btk login` writes only the credentials file.
func credentialsPath(cmd *cobra.Command, getenv func(string) string, cfgPath string) string {
	if p := getenv("BTK_CREDENTIALS"); p != "" {
		return p
	}
	explicit := getenv("BTK_CONFIG") != ""
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		explicit = true
	}
	if !explicit {
		return filepath.Join(filepath.Dir(cfgPath), "credentials.yaml")
	}
	base := strings.TrimSuffix(strings.TrimSuffix(cfgPath, ".yaml"), ".yml")
	return base + ".credentials.yaml"
}

// readCredentials merges the login state at path into v, above the config
// file: its server and token win over the file's. A config file written
// before the two were apart may hold a token too; it is read only while
// there is no credentials file (the first login or logout makes one).
// It returns the saved login state: its token and device token belong to
// its server alone (savedLogin).
func readCredentials(v *viper.Viper, path string) (savedLogin, error) {
	b, err := os.ReadFile(path) // #nosec G304 -- the user's own config or credentials file
	if errors.Is(err, fs.ErrNotExist) {
		return savedLogin{}, nil
	}
	if err != nil {
		return savedLogin{}, fmt.Errorf("reading credentials: %w", err)
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return savedLogin{}, fmt.Errorf("reading credentials %s: %w", path, err)
	}
	state := map[string]any{keyToken: ""}
	for _, k := range []string{keyServer, keyToken, keyDevice} {
		if s, ok := doc[k].(string); ok && s != "" {
			state[k] = s
		}
	}
	saved := savedLogin{token: fmt.Sprint(state[keyToken])}
	if s, ok := state[keyServer].(string); ok {
		saved.server = client.BaseURL(s)
	}
	if s, ok := state[keyDevice].(string); ok {
		saved.device = s
	}
	return saved, v.MergeConfigMap(state)
}

// savedLogin is the credentials file's login: a session token and a device
// token that only its server issued, and only its server is sent (another
// --server or BTK_SERVER gets neither: a typo or a staging variable would
// hand it a live session).
type savedLogin struct{ server, token, device string }

// forServer reports whether the saved login may be sent to server.
func (s savedLogin) forServer(server string) bool { return s.server != "" && s.server == server }

// readConfig merges the config file at path into v. A missing file is not
// an error; a key that is neither the CLI's nor the server's (the file may
// be both's) is a usage error naming its line, as `btk serve` makes it: a
// mistyped "sever:" would otherwise send the command to the default server.
func readConfig(v *viper.Viper, path string) error {
	b, err := os.ReadFile(path) // #nosec G304 -- the user's own config file
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reading config %s: %w", path, err)
	}
	if err := checkClientConfigKeys(path, b); err != nil {
		return err
	}
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("reading config %s: %w", path, err)
	}
	return nil
}

// checkClientConfigKeys refuses a config file whose top-level keys include
// one that neither the CLI nor `btk serve` reads.
func checkClientConfigKeys(path string, b []byte) error {
	m, err := configMapping(path, b)
	if m == nil {
		return err // nil: an empty file
	}
	known := mapKeys(clientKeys)
	cfg := defaultServeConfig()
	for _, s := range cfg.settings() {
		known = append(known, s.key)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; !slices.Contains(known, k.Value) {
			return unknownKeyError(path, k, known)
		}
	}
	return nil
}

// updateConfig sets and removes keys of the YAML file at path (the
// credentials file), keeping the others. It writes the file with mode 0600 (its directory 0700) and
// replaces it atomically, so a token is never readable by others, not even
// for a moment.
func updateConfig(path string, set map[string]string, unset ...string) error {
	doc := map[string]any{}
	b, err := os.ReadFile(path) // #nosec G304 -- the user's own config or credentials file
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading config: %w", err)
	default:
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("reading config %s: %w", path, err)
		}
		if doc == nil {
			doc = map[string]any{}
		}
	}
	for k, v := range set {
		doc[k] = v
	}
	for _, k := range unset {
		delete(doc, k)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml") // mode 0600
	if err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	return nil
}

// validServer checks that s is an http(s) base address. A trailing /graphql
// (the endpoint, as in the README's curl session) is accepted and dropped.
func validServer(s string) error {
	u, err := url.Parse(client.BaseURL(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("invalid server address %q: want http://host:port or https://host", btk.RedactURL(s))
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return usageErrorf("invalid server address %q: want the server's base address (such as https://btk.example.com), not a path under it", btk.RedactURL(s))
	}
	return nil
}

// bind makes viper key name answer to its flag (if any) and to BTK_<NAME>
// (dashes become underscores): flags beat env beat the config file.
func bind(v *viper.Viper, name string, flag *pflag.Flag) {
	if flag != nil {
		_ = v.BindPFlag(name, flag) // fails only for a nil flag
	}
	_ = v.BindEnv(name, "BTK_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))) // fails only without a name
}
