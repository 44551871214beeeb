package btk_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/btk-project/btk/internal/btk"
)

// A webhook subscribes only to event types that exist
// (docs/webhooks.md#events): an attack made one with --event nosuch.event,
// accepted silently, which never fired. The refusal names the type and
// lists the known ones, and stores nothing.
func TestUnknownEventTypeRefused(t *testing.T) {
	e := newLeakEnv(t, func(c *btk.Config) { c.WebhookAllowPrivate = true })
	ctx := context.Background()
	for _, events := range [][]string{
		{"nosuch.event"}, {"api_key.created", "api_key.create"}, {"API_KEY.CREATED"}, {"account.created"}, {""},
	} {
		_, err := e.svc.CreateWebhook(ctx, e.owner, "http://127.0.0.1:9/hook", events)
		if btk.ErrorCode(err) != btk.CodeBadUserInput {
			t.Fatalf("events %q: %v, want BAD_USER_INPUT", events, err)
		}
		bad := events[len(events)-1]
		if msg := err.Error(); !strings.Contains(msg, strconv.Quote(bad)) || !strings.Contains(msg, "api_key.revoked_all") ||
			!strings.Contains(msg, "docs/webhooks.md#events") {
			t.Errorf("events %q: %q does not name the type and list the known ones", events, msg)
		}
	}
	if hooks, err := e.svc.Webhooks(ctx, e.owner); err != nil || len(hooks) != 0 {
		t.Fatalf("after the refusals: %d webhooks, %v", len(hooks), err)
	}
	for _, events := range [][]string{nil, {"*"}, btk.WebhookEventTypes(), {" api_key.leaked ", "api_key.leaked"}} {
		if _, err := e.svc.CreateWebhook(ctx, e.owner, "http://127.0.0.1:9/hook", events); err != nil {
			t.Errorf("events %q: %v", events, err)
		}
	}
}

// Every event a workspace's audit log can hold is a type a webhook may
// subscribe to, and docs/webhooks.md#events lists exactly those: the
// constants named Event… and the key actions' event names in this
// package's source, but for account events, which belong to no workspace.
func TestEveryEventTypeSubscribable(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	eventName := regexp.MustCompile(`^[a-z_]+\.[a-z_]+$`)
	var inSource []string
	add := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			// account.* belong to no workspace; workspace.created is written
			// before its workspace can have a webhook (docs/webhooks.md#events).
			if s, _ := strconv.Unquote(lit.Value); eventName.MatchString(s) && !strings.HasPrefix(s, "account.") && s != btk.EventWorkspaceCreated {
				inSource = append(inSource, s)
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				switch {
				case strings.HasPrefix(name.Name, "Event") && i < len(spec.Values):
					add(spec.Values[i])
				case name.Name == "eventActions" && i < len(spec.Values):
					if lit, ok := spec.Values[i].(*ast.CompositeLit); ok {
						for _, el := range lit.Elts {
							add(el.(*ast.KeyValueExpr).Value)
						}
					}
				}
			}
			return true
		})
	}
	known := btk.WebhookEventTypes()
	slices.Sort(inSource)
	sorted := slices.Sorted(slices.Values(known))
	if !slices.Equal(inSource, sorted) {
		t.Errorf("event types in the source %q, subscribable %q", inSource, sorted)
	}

	doc, err := os.ReadFile("../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(strings.SplitN(string(doc), "\n## Events\n", 2)[1], "\n## ")
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " | "); ok && strings.HasPrefix(line, "| `") {
			for _, m := range regexp.MustCompile("`([a-z_]+\\.[a-z_]+)`").FindAllStringSubmatch(first, -1) {
				listed = append(listed, m[1])
			}
		}
	}
	if !slices.Equal(listed, known) {
		t.Errorf("docs/webhooks.md#events lists %q, subscribable (in this order) %q", listed, known)
	}
}
