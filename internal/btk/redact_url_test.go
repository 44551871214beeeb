package btk

import (
	"strings"
	"testing"
)

// Every secret a settings URL may carry is hidden, wherever it sits; the
// rest stays readable.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:S3cret@db/btk?sslmode=disable&sslpassword=S3cret", "postgres://u:xxxxx@db/btk?sslmode=disable&sslpassword=xxxxx"},
		{"postgres://u@db/btk?password=S3cret&connect_timeout=5", "postgres://u@db/btk?password=xxxxx&connect_timeout=5"},
		{"postgresql://db/btk?PassWord=S3cret&ssl%70assword=S3cret", "postgresql://db/btk?PassWord=xxxxx&ssl%70assword=xxxxx"},
		{"redis+sentinel://:S3cret@s1,s2/m?sentinel_password=S3cret", "redis+sentinel://:xxxxx@s1,s2/m?sentinel_password=xxxxx"},
		{"https://u:S3cret@h/x?access_token=S3cret&api_key=S3cret&client_secret=S3cret&a=1", "https://u:xxxxx@h/x?access_token=xxxxx&api_key=xxxxx&client_secret=xxxxx&a=1"},
		{"ftp://u:S3cret@h/", "ftp://u:xxxxx@h/"},
		{"http://h:9000", "http://h:9000"},
		{"postgres://u:S3/cret@h/db", "postgres://(unparsable URL)"},
		{"postgres://h/db?pass%zzword=S3cret", "postgres://h/db?pass%zzword=xxxxx"},
		{"u:S3cret@h", "(unparsable URL)"},
	} {
		got := RedactURL(c.in)
		if got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "S3cret") {
			t.Errorf("RedactURL(%q) = %q: the secret shows", c.in, got)
		}
	}
}

// A webhook URL as the audit log and event payloads quote it: its origin,
// and a mark that there was more.
func TestURLOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B0/S3cret": "https://hooks.slack.com/…",
		"https://h.example:8443/x?token=S3cret":         "https://h.example:8443/…",
		"https://h.example/?token=S3cret":               "https://h.example/…",
		"https://h.example/#S3cret":                     "https://h.example/…",
		"https://h.example/":                            "https://h.example",
		"http://[2001:db8::1]:8080":                     "http://[2001:db8::1]:8080",
		"https://user:S3cret@h.example/":                "https://h.example",
		"not a url S3cret":                              "(unparsable URL)",
		"mailto:S3cret@example.com":                     "(unparsable URL)",
	} {
		got := URLOrigin(in)
		if got != want {
			t.Errorf("URLOrigin(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "S3cret") {
			t.Errorf("URLOrigin(%q) = %q: the secret shows", in, got)
		}
	}
}
