package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra/doc"
	"github.com/spf13/viper"
)

var updateCLIDocs = flag.Bool("update-cli-docs", false, "rewrite docs/cli from the command tree")

const cliDocsDir = "../../docs/cli"

// genCLIDocs writes the markdown reference of every command into dir. The
// output depends on nothing but the commands: no date (DisableAutoGenTag), no
// environment, no version.
func genCLIDocs(t *testing.T, dir string) {
	t.Helper()
	streams := &iostreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}
	f := &factory{io: streams, v: viper.New(), version: "dev", getenv: func(string) string { return "" }, now: time.Now}
	root := newCommandTree(f)
	root.DisableAutoGenTag = true
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		t.Fatal(err)
	}
}

// mdFiles maps each .md file name in dir to its content.
func mdFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// TestCLIReference checks that docs/cli is what the commands generate; with
// -update-cli-docs (go generate) it rewrites it instead.
func TestCLIReference(t *testing.T) {
	tmp := t.TempDir()
	genCLIDocs(t, tmp)
	want := mdFiles(t, tmp)
	if *updateCLIDocs {
		for name := range mdFiles(t, cliDocsDir) {
			if _, ok := want[name]; !ok {
				if err := os.Remove(filepath.Join(cliDocsDir, name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.MkdirAll(cliDocsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range want {
			if err := os.WriteFile(filepath.Join(cliDocsDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	got := mdFiles(t, cliDocsDir)
	var stale []string
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			stale = append(stale, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			stale = append(stale, name+" (no such command)")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("docs/cli is stale (run go generate ./...): %s", strings.Join(stale, ", "))
	}
}

// The reference is the same whoever generates it, wherever.
func TestCLIReferenceIsDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	genCLIDocs(t, a)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("COLUMNS", "40")
	genCLIDocs(t, b)
	fa, fb := mdFiles(t, a), mdFiles(t, b)
	if len(fa) == 0 || len(fa) != len(fb) {
		t.Fatalf("%d and %d files", len(fa), len(fb))
	}
	for name, content := range fa {
		if !bytes.Equal(content, fb[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}
