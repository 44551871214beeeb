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
	want := []Match{{"x", 2, 9, k1}, {"x", 4, 4, k2}, {"x", 4, 4 + 56 + 6, k1}}
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
		want = append(want, Match{"x", line, len(pad) + 2, k})
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
	res := Paths([]string{dir}, 3)
	if len(res.Errors) != 0 {
		t.Fatal(res.Errors)
	}
	if len(res.Matches) != 1 || res.Matches[0].Path != filepath.Join(dir, "a", "config.env") || res.Matches[0].Column != 5 {
		t.Fatalf("matches %+v", res.Matches)
	}
	if res.Files != 3 || res.Skipped != 1 {
		t.Errorf("files %d, skipped %d; want 3 read, 1 binary", res.Files, res.Skipped)
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
