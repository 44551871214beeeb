package keyscan

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/btk-project/btk/internal/btk"
)

func newKey(t testing.TB) string {
	t.Helper()
	k, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
	return k
}

func scanString(t *testing.T, s string, buf []byte) []Match {
	t.Helper()
	var out []Match
	if err := Reader(strings.NewReader(s), "x", buf, true, func(m Match) { out = append(out, m) }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReaderFindsKeysWithPositions(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	text := "first line\nAPI_KEY=" + k1 + "\n\n  \"" + k2 + "\" and " + k1 + "\n"
	got := scanString(t, text, nil)
	want := []Match{{"x", 2, 9, k1, false}, {"x", 4, 4, k2, false}, {"x", 4, 4 + 56 + 6, k1, false}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("match %d: %+v; want %+v", i, got[i], want[i])
		}
	}
	if d := got[0].Display(); d != k1[:12]+"_…"+k1[52:] || strings.Contains(d, k1[13:50]) {
		t.Errorf("Display %q", d)
	}
}

func TestReaderRefusesLookalikes(t *testing.T) {
	k := newKey(t)
	for name, s := range map[string]string{
		"longer token after":  k + "x",
		"longer token before": "x" + k,
		"underscore before":   "_" + k,
		"upper hex prefix":    "btk_3F2A9C1E" + k[12:],
		"short":               k[:55],
		"bad last char":       k[:55] + "B", // stray low bits
		"public key":          "bpk" + k[3:],
	} {
		if got := scanString(t, s, nil); len(got) != 0 {
			t.Errorf("%s: matched %+v", name, got)
		}
	}
	if got := scanString(t, k, nil); len(got) != 1 {
		t.Errorf("a key alone: %+v", got)
	}
}

// Keys across chunk boundaries are found once, at the right line and
// column, whatever the chunk size and however the reader splits its reads.
func TestReaderChunkBoundaries(t *testing.T) {
	k := newKey(t)
	var b strings.Builder
	var want []Match
	line := 1
	for i := range 300 {
		pad := strings.Repeat("y", i%97)
		b.WriteString(pad + " " + k + "\n")
		want = append(want, Match{"x", line, len(pad) + 2, k, false})
		line++
		if i%7 == 0 {
			b.WriteString("\n")
			line++
		}
	}
	text := b.String()
	for _, size := range []int{4 * btk.KeyLen, 300, 1000, 4096, chunkSize} {
		var got []Match
		err := Reader(iotest.OneByteReader(strings.NewReader(text)), "x", make([]byte, size), true, func(m Match) { got = append(got, m) })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("chunk %d: %d matches; want %d", size, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("chunk %d, match %d: %+v; want %+v", size, i, got[i], want[i])
			}
		}
	}
}

// AllowMarker marks the keys of its own line only; a line longer than the
// chunk is looked at as far as the chunk holds it, so a marker further away
// leaves the key reported (the safe way).
func TestReaderAllowMarker(t *testing.T) {
	k, k2 := newKey(t), newKey(t)
	for _, c := range []struct {
		text string
		buf  []byte
		want []bool
	}{
		{"KEY=" + k + " # btk:allow: a made-up key\n", nil, []bool{true}},
		{"// btk:allow\t" + k + " and " + k2, nil, []bool{true, true}},
		{"# btk:allow\nKEY=" + k + "\n", nil, []bool{false}},
		{"KEY=" + k + "\n# btk:allow\n" + k2 + "\n", nil, []bool{false, false}},
		{"KEY=" + k + " # btk:allo\n", nil, []bool{false}},
		{"btk:allow " + k + "\n" + k2 + " btk:allow", nil, []bool{true, true}},
		{"btk:allow" + strings.Repeat(" ", 1000) + k + "\n", make([]byte, 4*btk.KeyLen), []bool{false}},
	} {
		got := scanString(t, c.text, c.buf)
		if len(got) != len(c.want) {
			t.Fatalf("%q: %+v", c.text, got)
		}
		for i, m := range got {
			if m.Allowed != c.want[i] {
				t.Errorf("%q, key %d: allowed %v, want %v", c.text, i, m.Allowed, c.want[i])
			}
		}
	}
}

func TestExcluded(t *testing.T) {
	for _, c := range []struct {
		path     string
		patterns []string
		want     bool
	}{
		{"cmd/btk/testdata/script/errors.txtar", []string{"testdata"}, true},
		{"cmd/btk/testdata/script/errors.txtar", []string{"*.txtar"}, true},
		{"cmd/btk/testdata/script/errors.txtar", []string{"cmd/btk/testdata"}, true},
		{"./cmd/btk/testdata/", []string{"cmd/*/testdata/"}, true},
		{"cmd/btk/testdata/script/errors.txtar", []string{"cmd/btk/testdata/script/errors.txtar"}, true},
		{"cmd/btk/testdata/script/errors.txtar", []string{"btk/testdata"}, false}, // a path pattern starts at the root
		{"cmd/btk/scan.go", []string{"testdata", "*.txtar"}, false},
		{"cmd/btk/scan.go", nil, false},
		{"testdatax/a", []string{"testdata"}, false},
	} {
		if got := Excluded(c.path, c.patterns); got != c.want {
			t.Errorf("Excluded(%q, %q) = %v, want %v", c.path, c.patterns, got, c.want)
		}
	}
}

func TestPathsSkipsGitAndBinaries(t *testing.T) {
	dir := t.TempDir()
	k := newKey(t)
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/config.env", []byte("KEY="+k+"\n"))
	write(".git/objects/xx", []byte(k))
	write("img.bin", append([]byte{0, 1, 2}, k...))
	write("b/deep/notes.md", []byte("nothing here btk_ but a prefix\n"))
	os.Symlink(filepath.Join(dir, "a", "config.env"), filepath.Join(dir, "link.env"))
	res := Paths([]string{dir}, nil, 3)
	if len(res.Errors) != 0 {
		t.Fatal(res.Errors)
	}
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(dir, "a", "config.env") || res.Matches[0].Column != 5 {
		t.Fatalf("matches %+v", res.Matches)
	}
	if res.Files != 3 || res.Skipped != 1 {
		t.Errorf("files %d, skipped %d; want 3 read, 1 binary", res.Files, res.Skipped)
	}
	// An excluded directory is not read at all.
	write("a/testdata/fixture.txt", []byte(k))
	if res := Paths([]string{dir}, []string{"testdata"}, 3); len(res.Matches) != 1 || res.Files != 3 {
		t.Errorf("with testdata excluded: %d files read, matches %+v", res.Files, res.Matches)
	}
}

func BenchmarkReader(b *testing.B) {
	k := newKey(b)
	data := bytes.Repeat([]byte("some ordinary text of a source file, with btk_ mentioned now and then\n"), 1<<14)
	data = append(data, k...)
	buf := make([]byte, chunkSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		Reader(bytes.NewReader(data), "x", buf, true, func(Match) { n++ })
		if n != 1 {
			b.Fatal(n)
		}
	}
}
