package redisstate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Short timeouts: a key check that cannot reach Redis fails closed (503)
// quickly, and the pool reconnects by itself once Redis is back.
const (
	dialTimeout = time.Second
	ioTimeout   = 500 * time.Millisecond
)

// protocol is RESP2: btk uses no push message, and RESP3 makes go-redis
// look for pending pushes around every command (measured: a tenth of the
// client's CPU per check).
const protocol = 2

// Kind is the shape of the Redis deployment a URL names.
type Kind int

const (
	Standalone Kind = iota // redis:// or rediss://: one server (or a proxy in front of a primary)
	Sentinel               // redis+sentinel://: a primary found and followed through Sentinel
	Cluster                // redis+cluster://: Redis Cluster
)

func (k Kind) String() string {
	return [...]string{"standalone", "sentinel", "cluster"}[k]
}

// urlForms is the help every URL error ends with.
const urlForms = "want redis://[user:password@]host:port/db, rediss://…, " +
	"redis+sentinel://[:password@]host:port[,host:port…]/MASTER[/db] or " +
	"redis+cluster://[:password@]host:port[,host:port…]"

// badURL is a URL error that names the part at fault, never the password.
func badURL(format string, args ...any) error {
	return fmt.Errorf("--redis: "+format+" ("+urlForms+")", args...)
}

// settings is what every kind of client shares.
type settings struct {
	username, password string
	sentinelPassword   string
	tls                bool
	dial, read, write  time.Duration
}

// tlsConfig is the TLS of a rediss+… URL, nil for plain TCP.
func (st settings) tlsConfig() *tls.Config {
	if !st.tls {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}
}

// parse reads a --redis URL into the client it names, and for Sentinel the
// client's options (the primary's name, the sentinels). The client is not
// connected yet.
func parse(raw string, onConnect func(context.Context, *redis.Conn) error) (redis.UniversalClient, Kind, *redis.FailoverOptions, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, 0, nil, badURL("no scheme in the URL")
	}
	if unescapedPassword(raw) {
		// The parsers would read the rest of the password as a host, a
		// path or a query, and quote it in their errors.
		return nil, 0, nil, badURL("the password holds a /, ? or # that is not percent-encoded (write %%2F, %%3F, %%23)")
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
		if err := checkQuery(raw); err != nil {
			return nil, 0, nil, err
		}
		opt, err := redis.ParseURL(raw)
		if err != nil {
			// go-redis's own message may quote the URL: name the fault only.
			return nil, 0, nil, badURL("%s", describeParseError(err))
		}
		applyDefaults(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		opt.PoolTimeout, opt.MaxRetries = time.Second, 1
		opt.DialerRetries, opt.DialerRetryTimeout = 2, 20*time.Millisecond
		opt.OnConnect = onConnect
		if opt.Protocol == 0 {
			opt.Protocol = protocol
		}
		opt.DisableIdentity = true
		return redis.NewClient(opt), Standalone, nil, nil
	case "redis+sentinel", "rediss+sentinel":
		st, hosts, path, err := split(raw)
		if err != nil {
			return nil, 0, nil, err
		}
		parts := strings.Split(strings.Trim(path, "/"), "/")
		if parts[0] == "" {
			return nil, 0, nil, badURL("redis+sentinel needs the primary's name as the path (/MASTER)")
		}
		if len(parts) > 2 {
			return nil, 0, nil, badURL("redis+sentinel's path is /MASTER or /MASTER/db, not %q", path)
		}
		db := 0
		if len(parts) == 2 {
			if db, err = strconv.Atoi(parts[1]); err != nil || db < 0 {
				return nil, 0, nil, badURL("the database %q is not a number", parts[1])
			}
		}
		opt := &redis.FailoverOptions{
			MasterName: parts[0], SentinelAddrs: hosts, DB: db,
			Username: st.username, Password: st.password, SentinelPassword: st.sentinelPassword,
			DialTimeout: st.dial, ReadTimeout: st.read, WriteTimeout: st.write,
			PoolTimeout: time.Second, MaxRetries: 1,
			DialerRetries: 2, DialerRetryTimeout: 20 * time.Millisecond,
			OnConnect: onConnect, Protocol: protocol, DisableIdentity: true, TLSConfig: st.tlsConfig(),
		}
		return redis.NewFailoverClient(opt), Sentinel, opt, nil
	case "redis+cluster", "rediss+cluster":
		st, hosts, path, err := split(raw)
		if err != nil {
			return nil, 0, nil, err
		}
		if p := strings.Trim(path, "/"); p != "" && p != "0" {
			return nil, 0, nil, badURL("Redis Cluster has only database 0; remove the path %q", path)
		}
		if st.sentinelPassword != "" {
			return nil, 0, nil, badURL("sentinel_password is for redis+sentinel:// only")
		}
		opt := &redis.ClusterOptions{
			Addrs: hosts, Username: st.username, Password: st.password,
			DialTimeout: st.dial, ReadTimeout: st.read, WriteTimeout: st.write,
			PoolTimeout: time.Second, MaxRetries: 1, MaxRedirects: 3,
			DialerRetries: 2, DialerRetryTimeout: 20 * time.Millisecond,
			OnConnect: onConnect, Protocol: protocol, DisableIdentity: true, TLSConfig: st.tlsConfig(),
		}
		return redis.NewClusterClient(opt), Cluster, nil, nil
	}
	return nil, 0, nil, badURL("unknown scheme %q", scheme)
}

// CheckURL refuses a --redis URL that Open would refuse, without
// connecting: btk serve checks its settings before it opens anything.
func CheckURL(raw, prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return errBracedPrefix
	}
	rdb, _, _, err := parse(raw, nil)
	if err != nil {
		return err
	}
	return rdb.Close()
}

// readTimeout is the read timeout of rdb's connections.
func readTimeout(rdb redis.UniversalClient) time.Duration {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	}
	return ioTimeout
}

// dialSettings reports whether rdb dials with TLS, and its dial timeout.
func dialSettings(rdb redis.UniversalClient) (tls bool, dial time.Duration) {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().TLSConfig != nil, c.Options().DialTimeout
	case *redis.ClusterClient:
		return c.Options().TLSConfig != nil, c.Options().DialTimeout
	}
	return false, dialTimeout
}

func applyDefaults(dial, read, write *time.Duration) {
	if *dial == 0 {
		*dial = dialTimeout
	}
	if *read == 0 {
		*read = ioTimeout
	}
	if *write == 0 {
		*write = ioTimeout
	}
}

// split reads the TLS of the scheme, the user part, the comma-separated
// host:port list, the path and the query of a redis+sentinel:// or
// redis+cluster:// URL, plain or rediss (url.Parse refuses a list of hosts).
func split(raw string) (settings, []string, string, error) {
	var st settings
	scheme, rest, _ := strings.Cut(raw, "://")
	st.tls = strings.HasPrefix(strings.ToLower(scheme), "rediss")
	rest, query, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		var err error
		if st.username, err = url.PathUnescape(user); err != nil {
			return st, nil, "", badURL("the user name is not valid URL escaping")
		}
		if hasPass {
			if st.password, err = url.PathUnescape(pass); err != nil {
				return st, nil, "", badURL("the password is not valid URL escaping")
			}
		}
		authority = authority[at+1:]
	}
	if authority == "" {
		return st, nil, "", badURL("no host:port in the URL")
	}
	var hosts []string
	for _, h := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return st, nil, "", badURL("%q is not host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return st, nil, "", badURL("the port of %q is not a port number", h)
		}
		hosts = append(hosts, h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return st, nil, "", badURL("the query is not valid URL escaping")
	}
	for name, vals := range q {
		v := vals[len(vals)-1]
		var d *time.Duration
		switch name {
		case "dial_timeout":
			d = &st.dial
		case "read_timeout":
			d = &st.read
		case "write_timeout":
			d = &st.write
		case "sentinel_password":
			st.sentinelPassword = v
			continue
		default:
			return st, nil, "", badURL("unknown parameter %q (dial_timeout, read_timeout, write_timeout, sentinel_password)", name)
		}
		if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
			return st, nil, "", badURL("%s=%q is not a duration such as 1s", name, v)
		}
	}
	applyDefaults(&st.dial, &st.read, &st.write)
	return st, hosts, path, nil
}

// checkQuery refuses the values of a redis:// URL's parameters that
// go-redis takes without a word and then panics on (pool_size=-5), or
// that undo a bound btk relies on: a timeout of 0 or below waits for ever
// on a stalled Redis (read_timeout=-5s), where btk must fail closed within
// its read timeout (docs/clusters.md#when-redis-stalls). go-redis checks
// the rest of the query itself.
func checkQuery(raw string) error {
	_, query, ok := strings.Cut(raw, "?")
	if !ok {
		return nil
	}
	query, _, _ = strings.Cut(query, "#")
	q, err := url.ParseQuery(query)
	if err != nil {
		return badURL("the query is not valid URL escaping")
	}
	for name, vals := range q {
		v := vals[len(vals)-1]
		switch {
		case strings.HasSuffix(name, "_timeout"):
			if d, err := time.ParseDuration(v); err != nil || d <= 0 {
				return badURL("%s=%q is not a duration such as 1s", name, v)
			}
		case name == "pool_size", name == "min_idle_conns", name == "max_idle_conns", name == "max_active_conns":
			least := 0
			if name == "pool_size" {
				least = 1
			}
			if n, err := strconv.Atoi(v); err != nil || n < least || n > maxPoolSize {
				return badURL("%s=%q is not a number of connections from %d to %d", name, v, least, maxPoolSize)
			}
		}
	}
	return nil
}

// maxPoolSize bounds the connections a redis:// URL may ask for.
const maxPoolSize = 10_000

// unescapedPassword reports whether raw's user part holds a "/", "?" or
// "#" that is not percent-encoded: one of them comes before the last "@",
// and what follows that "@" is a host:port list. (An "@" in a query value,
// "?sentinel_password=p@ss", is not followed by one.)
func unescapedPassword(raw string) bool {
	_, rest, _ := strings.Cut(raw, "://")
	at := strings.LastIndexByte(rest, '@')
	end := strings.IndexAny(rest, "/?#")
	if at < 0 || end < 0 || end > at {
		return false
	}
	hosts := rest[at+1:]
	if i := strings.IndexAny(hosts, "/?#"); i >= 0 {
		hosts = hosts[:i]
	}
	for h := range strings.SplitSeq(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return false
		}
	}
	return true
}

// describeParseError turns go-redis's URL errors into a message without the
// URL (which holds the password).
func describeParseError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return "the URL does not parse: " + ue.Err.Error()
	}
	msg := err.Error()
	if i := strings.Index(msg, "redis"); i >= 0 && strings.Contains(msg, "://") {
		return "the URL is not valid"
	}
	return strings.TrimPrefix(msg, "redis: ")
}
