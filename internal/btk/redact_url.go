package btk

import (
	"net/url"
	"strings"
)

// secretParamWords mark a URL query parameter whose value is a secret:
// password and sslpassword (libpq), sentinel_password (Redis),
// access_token, api_key, client_secret, sig... A path-valued one such as
// sslkey is hidden too: a log line is better off without a guess.
var secretParamWords = []string{"pass", "pwd", "secret", "token", "key", "auth", "sig", "credential"}

// SecretParam reports whether a URL query parameter named name holds a
// secret (its name holds one of secretParamWords, in any case).
func SecretParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretParamWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// RedactURL is a URL from the settings (--db, --upstream, --server) as it
// may be logged or quoted in an error: the userinfo's password and the value
// of every SecretParam query parameter are "xxxxx"; the rest, in its
// order, is as given. A URL that does not parse is not quoted at all: the
// parser's idea of its parts (a password with a / in it) is a guess.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		if scheme, _, ok := strings.Cut(raw, "://"); ok && url.PathEscape(scheme) == scheme && !strings.ContainsAny(scheme, "@:") {
			return scheme + "://(unparsable URL)"
		}
		return "(unparsable URL)"
	}
	parts := strings.Split(u.RawQuery, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err != nil || SecretParam(name) {
			parts[i] = k + "=xxxxx"
		}
	}
	u.RawQuery = strings.Join(parts, "&")
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// URLOrigin is a URL reduced to its scheme, host and port, followed by "/…"
// when it had more: what an audit record or an event payload quotes of a
// webhook URL, whose path or query may hold the receiver's secret (a
// Slack-style hook carries it in its path). The audit chain keeps what it
// records for ever, and events go to every receiver (docs/webhooks.md#events).
func URLOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "(unparsable URL)"
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		out += "/…"
	}
	return out
}
