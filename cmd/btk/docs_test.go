package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

const repoRoot = "../.."

// docs/operating.md's settings table is what operators read instead of
// --help: every flag of btk serve, and its environment variable, must be in it.
func TestOperatingDocListsEveryServeSetting(t *testing.T) {
	table := section(t, "docs/operating.md", "## Settings of `btk serve`")
	newServeCmd().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		env := "BTK_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		row := "| `--" + f.Name + "` | `" + env + "` |"
		if !strings.Contains(table, row) {
			t.Errorf("docs/operating.md's settings table has no row starting %q", row)
		}
	})
}

// The README is the front door, not the manual.
func TestREADMEIsShort(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it under 250 and put the rest in docs/", n)
	}
}

// repoFiles calls fn with the path (relative to the repository) and content
// of every text file of the repository but .git and generated code.
func repoFiles(t *testing.T, fn func(path, content string)) {
	t.Helper()
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".graphql", ".sql", ".conf", ".txtar", ".sh", ".yaml", ".yml", ".html", ".js", ".css":
		default:
			if d.Name() != "Caddyfile" && d.Name() != "run" {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A clone has nothing beside the repository: no file may send a reader to
// documents outside it.
func TestNoReferenceOutsideTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`\.\./` + `shared|\b(SPEC|DESIGN)(\.md| §)`)
	repoFiles(t, func(path, content string) {
		for i, line := range strings.Split(content, "\n") {
			if outside.MatchString(line) {
				t.Errorf("%s:%d refers outside the repository: %s", path, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// slug is the anchor GitHub gives a markdown heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '—' && r != '–' && r != '→' && r != '…':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a markdown file (outside code blocks).
func anchors(content string) map[string]bool {
	a := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(content, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(h)
		for i := 1; a[s]; i++ { // GitHub numbers repeated headings
			if !a[s+"-"+strconv.Itoa(i)] {
				s = s + "-" + strconv.Itoa(i)
				break
			}
		}
		a[s] = true
	}
	return a
}

// Code and docs cite the documentation as docs/FILE.md#anchor: every cited
// file and section must exist, so that a renamed heading breaks a test
// rather than a reader's link. Sections are not cited by title, and Go
// comments cite no issue numbers.
func TestDocCitationsResolve(t *testing.T) {
	cite := regexp.MustCompile(`docs/([a-z0-9_/-]+\.md)(#[a-z0-9_-]+)?`)
	docLink := regexp.MustCompile(`\]\(([a-z0-9_./-]+\.md)(#[a-z0-9_-]+)?\)`)
	// A section named by its title after the file (§Heading, or the heading
	// in quotes) is one no test checks; an issue number points at a tracker
	// a clone does not have.
	byTitle := regexp.MustCompile(`docs/[a-z0-9_/-]+\.md,? *(§|")`)
	issue := regexp.MustCompile(`(?i)\bissues? [0-9]`)
	cache := map[string]map[string]bool{}
	check := func(where, file, anchor string) {
		a, ok := cache[file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
			if err != nil {
				t.Errorf("%s cites %s, which does not exist", where, file)
				cache[file] = nil
				return
			}
			a = anchors(string(b))
			cache[file] = a
		}
		if a != nil && anchor != "" && !a[strings.TrimPrefix(anchor, "#")] {
			t.Errorf("%s cites %s%s: no such section", where, file, anchor)
		}
	}
	repoFiles(t, func(path, content string) {
		for i, line := range strings.Split(content, "\n") {
			where := path + ":" + strconv.Itoa(i+1)
			if strings.HasSuffix(path, ".go") {
				// Citations are comments; a string may name any file.
				_, comment, ok := strings.Cut(line, "//")
				if !ok {
					continue
				}
				line = comment
			}
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				check(where, "docs/"+m[1], m[2])
			}
			if byTitle.MatchString(line) {
				t.Errorf("%s cites a section by its title (%s): write docs/FILE.md#anchor, which this test checks", where, strings.TrimSpace(line))
			}
			if issue.MatchString(line) && strings.HasSuffix(path, ".go") {
				t.Errorf("%s cites an issue, which a clone cannot read: cite docs/ or say why in words: %s", where, strings.TrimSpace(line))
			}
			if strings.HasSuffix(path, ".md") {
				for _, m := range docLink.FindAllStringSubmatch(line, -1) {
					if strings.Contains(m[1], "://") {
						continue
					}
					target := filepath.ToSlash(filepath.Join(filepath.Dir(path), m[1]))
					check(where, target, m[2])
				}
			}
		}
	})
}

// section returns the text of a markdown file's section under heading
// ("## Error codes", "### Configuration"), up to the next heading of its
// level.
func section(t *testing.T, file, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", file, heading)
	}
	text = text[start+1:]
	level, _, _ := strings.Cut(heading, " ")
	if end := strings.Index(text[len(heading):], "\n"+level+" "); end > 0 {
		text = text[:end+len(heading)]
	}
	return text
}

// docs/design.md#error-codes names every code the domain declares, and the
// client's own.
func TestDesignListsEveryErrorCode(t *testing.T) {
	table := section(t, "docs/design.md", "## Error codes")
	decl := regexp.MustCompile(`Code\s*=\s*"([A-Z_]+)"`)
	files, _ := filepath.Glob(filepath.Join(repoRoot, "internal", "btk", "*.go"))
	clientFiles, _ := filepath.Glob(filepath.Join(repoRoot, "internal", "client", "*.go"))
	files = append(files, clientFiles...)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			found++
			if !strings.Contains(table, "`"+m[1]+"`") {
				t.Errorf("docs/design.md#error-codes does not list %s (declared in %s)", m[1], f)
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d code declarations in internal/btk: the pattern is stale", found)
	}
}

// docs/design.md#exit-codes has a row for every exit code of the CLI.
func TestDesignListsEveryExitCode(t *testing.T) {
	table := section(t, "docs/design.md", "## Exit codes")
	b, err := os.ReadFile("exit.go")
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^\s*(exit[A-Za-z]+)\s*=\s*([0-9]+)`)
	ms := decl.FindAllStringSubmatch(string(b), -1)
	if len(ms) < 9 {
		t.Fatalf("found %d exit codes in exit.go: the pattern is stale", len(ms))
	}
	for _, m := range ms {
		if !strings.Contains(table, "\n| "+m[2]+" |") {
			t.Errorf("docs/design.md#exit-codes has no row for %s = %s", m[1], m[2])
		}
	}
}

// docs/design.md#configuration has a row for every global flag of the CLI.
func TestDesignListsEveryGlobalFlag(t *testing.T) {
	table := section(t, "docs/design.md", "### Configuration")
	streams := &iostreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	f := &factory{io: streams, v: viper.New(), getenv: func(string) string { return "" }, now: time.Now}
	newCommandTree(f).PersistentFlags().VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "help" {
			return
		}
		if !strings.Contains(table, "`--"+fl.Name+"`") {
			t.Errorf("docs/design.md#configuration has no row for --%s", fl.Name)
		}
	})
}
