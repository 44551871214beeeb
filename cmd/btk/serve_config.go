package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/gateway"
	"github.com/btk-project/btk/internal/redisstate"
	"github.com/btk-project/btk/internal/store"
)

// serveConfig is the configuration of `btk serve`
// (docs/operating.md#settings-of-btk-serve). It is filled in one order — defaults, then the config file,
// then BTK_* variables, then flags — by loadServeConfig, and checked once by
// Validate. It is not the CLI's settings nor its login state (config.go):
// `btk login` never writes the server's configuration.
type serveConfig struct {
	Addr              string
	DB                string
	Secret            string
	RatePerMinute     int
	RatePerDay        int
	LogFormat         string
	LogLevel          string
	BootstrapEmail    string
	BootstrapPassword string
	Dashboard         bool
	ProxyAddr         string // reverse proxy listener, off when empty
	Upstream          string
	UpstreamTimeout   time.Duration // wait for the upstream's response headers
	// Operations (ops.go).
	MetricsAddr    string
	TLSCert        string
	TLSKey         string
	TrustedProxies string
	// LeakReportKeys is a PEM file of the keys that sign leak reports.
	LeakReportKeys string
	AccessRules    string
	Redis          string
	RedisPrefix    string
	// SessionKeys and SessionKeysFile list the session signing keys, one
	// ID=SECRET each, the first signing (docs/security.md); sessionKeys is
	// what Validate made of them.
	SessionKeys     string
	SessionKeysFile string
	sessionKeys     []btk.SigningKey
	// UsageRetention is how long hourly usage counts are kept (docs/usage.md).
	UsageRetention time.Duration
	// GCPercent is the Go garbage collector's target (as GOGC); 0 means
	// DefaultGCPercent, or the GOGC variable when that is set.
	GCPercent int
	// WebhookAllowPrivate lets webhooks reach loopback, private and
	// link-local receivers (docs/webhooks.md).
	WebhookAllowPrivate bool
}

// defaultServeConfig is the configuration of a `btk serve` given nothing.
func defaultServeConfig() serveConfig {
	return serveConfig{
		Addr:          "127.0.0.1:8080",
		DB:            "./btk.db",
		RatePerMinute: btk.DefaultPerMinute,
		RatePerDay:    btk.DefaultPerDay,
		LogFormat:     "text",
		LogLevel:      "info",
		Dashboard:     true,
		RedisPrefix:   "btk:",
		// The upstream's time to its response headers; then 504.
		UpstreamTimeout: gateway.DefaultUpstreamTimeout,
		// UsageRetention is how long hourly usage counts are kept.
		UsageRetention: btk.DefaultUsageRetention,
	}
}

// serveSetting is one setting: its key in the config file (and the name of
// its flag, if it has one), BTK_<KEY> in the environment, and where it goes.
type serveSetting struct {
	key   string
	usage string // the flag's help; secrets have no flag
	flag  bool
	ptr   any // *string, *int, *bool or *time.Duration
}

// settings lists every setting of c. The config file accepts these keys and
// no others.
func (c *serveConfig) settings() []serveSetting {
	return []serveSetting{
		{"addr", "address to listen on", true, &c.Addr},
		{"db", "SQLite database file (created if missing) or postgres:// URL", true, &c.DB},
		{"secret", "", false, &c.Secret},
		{"rate-per-minute", "server-wide default requests per minute per key", true, &c.RatePerMinute},
		{"rate-per-day", "server-wide default requests per day per key", true, &c.RatePerDay},
		{"log-format", "log format: text or json", true, &c.LogFormat},
		{"log-level", "log level: debug, info, warn or error", true, &c.LogLevel},
		{"bootstrap-email", "", false, &c.BootstrapEmail},
		{"bootstrap-password", "", false, &c.BootstrapPassword},
		{"dashboard", "serve the owner dashboard at /", true, &c.Dashboard},
		{"proxy-addr", "also listen here as a reverse proxy to --upstream, checking X-Api-Key on every request", true, &c.ProxyAddr},
		{"upstream", "the service the reverse proxy forwards accepted requests to, e.g. http://127.0.0.1:9000", true, &c.Upstream},
		{"upstream-timeout", "how long the reverse proxy waits for the upstream's response headers before answering 504", true, &c.UpstreamTimeout},
		{"redis", "redis://, redis+sentinel:// or redis+cluster:// URL of the state several instances share; needed to run more than one on PostgreSQL", true, &c.Redis},
		{"redis-prefix", "prefix of btk's keys in Redis: instances that share state use the same", true, &c.RedisPrefix},
		{"metrics-addr", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9090; off when empty", true, &c.MetricsAddr},
		{"tls-cert", "PEM certificate (chain) file: serve HTTPS and HTTP/2 on every listener; re-read on SIGHUP", true, &c.TLSCert},
		{"tls-key", "PEM private key file of --tls-cert", true, &c.TLSKey},
		{"trusted-proxies", "comma-separated CIDR ranges or addresses whose X-Forwarded-For is believed", true, &c.TrustedProxies},
		{"leak-report-keys", "PEM file of the ECDSA P-256 public keys whose signed leak reports POST /v1/leaks accepts (GitHub's secret scanning keys)", true, &c.LeakReportKeys},
		{"usage-retention", "how long each key's hourly usage counts and finished webhook deliveries are kept, e.g. 30d or 2160h", true, &c.UsageRetention},
		{"webhook-allow-private", "let webhooks deliver to loopback, private and link-local addresses (refused by default)", true, &c.WebhookAllowPrivate},
		{"access-rules", "YAML access rules: the scopes a key needs per path and method at /v1/authorize and the proxy; re-read on SIGHUP (docs/access.md)", true, &c.AccessRules},
		{"gc-percent", "", false, &c.GCPercent}, // as GOGC; 0: DefaultGCPercent, or GOGC when set
		{"session-keys", "", false, &c.SessionKeys},
		{"session-keys-file", "", false, &c.SessionKeysFile},
	}
}

// envName is the environment variable of a setting.
func envName(key string) string {
	return "BTK_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// clientKeys are the CLI's keys (config.go). A config file written before
// the server's and the CLI's files were apart holds both; serve ignores these.
var clientKeys = map[string]bool{keyServer: true, keyToken: true, keyOutput: true, keyTimeout: true, keyElevation: true, keyCACert: true, keyDevice: true}

// addServeFlags declares the flags of the settings that have one, with the
// defaults as their defaults.
func addServeFlags(f *pflag.FlagSet) {
	def := defaultServeConfig()
	for _, s := range def.settings() {
		if !s.flag {
			continue
		}
		usage := s.usage + " (" + envName(s.key) + ")"
		switch p := s.ptr.(type) {
		case *string:
			f.String(s.key, *p, usage)
		case *int:
			f.Int(s.key, *p, usage)
		case *bool:
			f.Bool(s.key, *p, usage)
		case *time.Duration:
			d := dayDuration(*p)
			f.Var(&d, s.key, usage)
		}
	}
}

// set parses value into the setting's field.
func (s serveSetting) set(value string) error {
	switch p := s.ptr.(type) {
	case *string:
		*p = value
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", value)
		}
		*p = n
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", value)
		}
		*p = b
	case *time.Duration:
		d, err := parseDuration(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("want a duration such as 30s or 2m, got %q", value)
		}
		*p = d
	}
	return nil
}

// loadServeConfig builds the configuration of cmd (`btk serve`): defaults,
// the config file, BTK_* variables, flags; then Validate. Every mistake is
// an error naming where it is: an unknown key of the file (with its line and
// the key it resembles), a value of the wrong type in the file or the
// environment, a --config that does not exist.
func loadServeConfig(cmd *cobra.Command, getenv func(string) string) (serveConfig, error) {
	cfg := defaultServeConfig()
	byKey := map[string]serveSetting{}
	for _, s := range cfg.settings() {
		byKey[s.key] = s
	}
	path, explicit, err := serveConfigPath(cmd, getenv)
	if err != nil {
		return cfg, err
	}
	b, err := os.ReadFile(path) // #nosec G304 -- the config file the operator named (--config, BTK_CONFIG)
	switch {
	case err == nil:
		if err := cfg.readFile(path, b, byKey); err != nil {
			return cfg, err
		}
	case errors.Is(err, fs.ErrNotExist) && !explicit:
	case errors.Is(err, fs.ErrNotExist):
		return cfg, usageErrorf("config file %s does not exist", path)
	default:
		return cfg, fmt.Errorf("reading config %s: %w", path, err)
	}
	for _, s := range cfg.settings() {
		name := envName(s.key)
		if v := getenv(name); v != "" {
			if err := s.set(v); err != nil {
				return cfg, usageErrorf("%s: %v", name, err)
			}
		}
	}
	for _, s := range cfg.settings() {
		if !s.flag {
			continue
		}
		if f := cmd.Flags().Lookup(s.key); f != nil && f.Changed {
			if err := s.set(f.Value.String()); err != nil {
				return cfg, usageErrorf("--%s: %v", s.key, err)
			}
		}
	}
	err = cfg.Validate()
	return cfg, err
}

// serveConfigPath is the file `btk serve` reads: --config or BTK_CONFIG
// (which must exist), else the default path (which may not).
func serveConfigPath(cmd *cobra.Command, getenv func(string) string) (path string, explicit bool, err error) {
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		return f.Value.String(), true, nil
	}
	if p := getenv("BTK_CONFIG"); p != "" {
		return p, true, nil
	}
	path, err = configPath(cmd, getenv)
	return path, false, err
}

// readFile applies the YAML mapping b (the file at path) to c.
func (c *serveConfig) readFile(path string, b []byte, byKey map[string]serveSetting) error {
	m, err := configMapping(path, b)
	if m == nil {
		return err // nil: an empty file
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		s, ok := byKey[k.Value]
		if !ok {
			if clientKeys[k.Value] {
				continue // the CLI's, in a combined file from before
			}
			return unknownKeyError(path, k, mapKeys(byKey))
		}
		if seen[k.Value] {
			return usageErrorf("config %s, line %d: key %q given twice", path, k.Line, k.Value)
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode {
			return usageErrorf("config %s, line %d: %s: want a single value", path, v.Line, k.Value)
		}
		if err := s.set(v.Value); err != nil {
			return usageErrorf("config %s, line %d: %s: %v", path, v.Line, k.Value, err)
		}
	}
	return nil
}

// configMapping is the top-level mapping of the config file at path whose
// bytes are b; nil and no error for an empty file.
func configMapping(path string, b []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, usageErrorf("config %s: %v", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, usageErrorf("config %s: want a mapping of settings (key: value), line %d", path, m.Line)
	}
	return m, nil
}

// unknownKeyError refuses the key k of the config file at path, naming the
// known key it resembles.
func unknownKeyError(path string, k *yaml.Node, known []string) error {
	msg := fmt.Sprintf("config %s, line %d: unknown key %q", path, k.Line, k.Value)
	if near := nearestKey(k.Value, known); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return usageErrorf("%s", msg)
}

// mapKeys is the keys of m.
func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// nearestKey is the known key closest to a mistyped one (at most two edits
// away, or the same but for _ in place of -), or "".
func nearestKey(key string, keys []string) string {
	keys = slices.Clone(keys)
	sort.Strings(keys)
	if dashed := strings.ReplaceAll(key, "_", "-"); slices.Contains(keys, dashed) {
		return dashed
	}
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Validate checks the configuration as a whole, before anything starts. Its
// errors are usage errors (exit 2): the operator's settings are wrong.
func (c *serveConfig) Validate() error {
	if c.Addr == "" {
		return usageErrorf("--addr: an address to listen on is required")
	}
	for _, l := range []struct{ flag, addr string }{{"addr", c.Addr}, {"proxy-addr", c.ProxyAddr}, {"metrics-addr", c.MetricsAddr}} {
		if err := checkListenAddr(l.addr); l.addr != "" && err != nil {
			return usageErrorf("--%s %q: %v", l.flag, l.addr, err)
		}
	}
	if err := store.CheckDB(c.DB); err != nil {
		return usageErrorf("--db: %v", err)
	}
	if c.Redis != "" {
		if err := redisstate.CheckURL(c.Redis, c.RedisPrefix); err != nil {
			return usageErrorf("%v", err) // "--redis: …", never the password
		}
	}
	if c.RatePerMinute < 1 || c.RatePerMinute > btk.MaxPerMinute {
		return usageErrorf("--rate-per-minute: want 1 to %d, got %d", btk.MaxPerMinute, c.RatePerMinute)
	}
	if c.RatePerDay < 1 || c.RatePerDay > btk.MaxPerDay {
		return usageErrorf("--rate-per-day: want 1 to %d, got %d", btk.MaxPerDay, c.RatePerDay)
	}
	if c.RatePerMinute > c.RatePerDay {
		return usageErrorf("--rate-per-minute (%d) must not exceed --rate-per-day (%d)", c.RatePerMinute, c.RatePerDay)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return usageErrorf("--log-format must be text or json, not %q", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return usageErrorf("--log-level must be debug, info, warn or error, not %q", c.LogLevel)
	}
	if c.Secret != "" && len(c.Secret) < 32 {
		return usageErrorf("secret (BTK_SECRET): want at least 32 bytes, got %d", len(c.Secret))
	}
	if _, err := proxyUpstream(*c); err != nil {
		return usageErrorf("%v", err)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return usageErrorf("--tls-cert and --tls-key go together")
	}
	switch {
	case c.SessionKeys != "" && c.SessionKeysFile != "":
		return usageErrorf("session-keys (BTK_SESSION_KEYS) and session-keys-file (BTK_SESSION_KEYS_FILE): give one, not both")
	case c.SessionKeys != "":
		keys, err := btk.ParseSessionKeys(c.SessionKeys)
		if err != nil {
			return usageErrorf("session-keys (BTK_SESSION_KEYS): %v", err)
		}
		c.sessionKeys = keys
	case c.SessionKeysFile != "":
		b, err := os.ReadFile(c.SessionKeysFile) // #nosec G304 -- the keys file the operator named (session-keys-file)
		if err != nil {
			return usageErrorf("session-keys-file (BTK_SESSION_KEYS_FILE): %v", err)
		}
		keys, err := btk.ParseSessionKeys(string(b))
		if err != nil {
			return usageErrorf("session-keys-file %s: %v", c.SessionKeysFile, err)
		}
		if len(keys) == 0 {
			return usageErrorf("session-keys-file %s: no key in it", c.SessionKeysFile)
		}
		c.sessionKeys = keys
	}
	if c.UsageRetention < time.Hour {
		return usageErrorf("--usage-retention: want at least 1h (for example 90d), got %v", c.UsageRetention)
	}
	if c.GCPercent < -1 {
		return usageErrorf("gc-percent (BTK_GC_PERCENT): want -1 (off), 0 (btk's default, 400, or GOGC) or a positive percentage, got %d", c.GCPercent)
	}
	return nil
}

// checkListenAddr checks what net.Listen would refuse only when serve
// listens, after other work (":99999" exited 1, not 2): HOST:PORT, with a
// port of 0 to 65535 or a service name.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want HOST:PORT, such as 127.0.0.1:8080 or :8080")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("want a port from 0 to 65535, not %q", port)
	}
	return nil
}

// dayDuration is a duration flag that also takes days ("90d", "1d12h"), as
// the settings file and BTK_* variables do.
type dayDuration time.Duration

func (d *dayDuration) Set(s string) error {
	v, err := parseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = dayDuration(v)
	return nil
}

func (d *dayDuration) String() string {
	v := time.Duration(*d)
	if v > 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

func (d *dayDuration) Type() string { return "duration" }
