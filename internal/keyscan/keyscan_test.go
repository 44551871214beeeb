package keyscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf16"

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
	matches, errs, st := walk([]string{dir}, nil, 3)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if len(matches) != 1 || matches[0].Path != filepath.Join(dir, "a", "config.env") || matches[0].Column != 5 {
		t.Fatalf("matches %+v", matches)
	}
	if st.Files != 3 || st.Skipped != 1 {
		t.Errorf("files %d, skipped %d; want 3 read, 1 binary", st.Files, st.Skipped)
	}
	// An excluded directory is not read at all.
	write("a/testdata/fixture.txt", []byte(k))
	if matches, _, st := walk([]string{dir}, []string{"testdata"}, 3); len(matches) != 1 || st.Files != 3 {
		t.Errorf("with testdata excluded: %d files read, matches %+v", st.Files, matches)
	}
}

// walk is Walk collecting what it reports.
func walk(paths, exclude []string, workers int) ([]Match, []error, Stats) {
	var matches []Match
	var errs []error
	st := Walk(paths, exclude, workers, func(m Match) { matches = append(matches, m) }, func(err error) { errs = append(errs, err) })
	return matches, errs, st
}

// Walk reports keys and errors in the order of the walk whatever the number
// of workers, also when files read ahead hold more keys than they may keep
// (pendingMatches) and wait their turn.
func TestWalkReportsInWalkOrder(t *testing.T) {
	dir := t.TempDir()
	k := newKey(t)
	var want []string
	for i := range 40 {
		// Names whose walk order is not their order as strings ("a.x"
		// sorts before "a/b" but is walked after the directory a).
		rel := filepath.Join(string(rune('a'+i%5)), "f"+strings.Repeat("x", i)+".txt")
		if i%3 == 0 {
			rel = string(rune('a'+i%5)) + strings.Repeat("x", i) + ".txt"
		}
		keys := []int{1, 3, pendingMatches + 50, 0, 2 * pendingMatches}[i%5]
		var b strings.Builder
		for range keys {
			b.WriteString(k + "\n")
		}
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			for j := range strings.Count(mustRead(t, path), "\n") {
				want = append(want, path+":"+strconv.Itoa(j+1))
			}
		}
		return nil
	})
	want = append(want, "error "+missing)
	for _, workers := range []int{1, 2, 8} {
		var got []string
		Walk([]string{dir, missing}, nil, workers, func(m Match) {
			got = append(got, m.Path+":"+strconv.Itoa(m.Line))
		}, func(err error) {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				got = append(got, "error "+pe.Path)
			}
		})
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%d workers: %d reports; want %d in the walk's order", workers, len(got), len(want))
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Walk's memory does not grow with the number of keys found: the live heap
// measured while 200,000 keys are reported stays within a few chunks of
// what it is before (docs/leaks.md#how-fast-btk-scan-is). Holding the
// matches, as Paths did, took 26 MB here.
func TestWalkMemoryBounded(t *testing.T) {
	dir := t.TempDir()
	line := []byte(newKey(t) + "\n")
	for i := range 8 {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), bytes.Repeat(line, 25_000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	live := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := live()
	var peak uint64
	n := 0
	Walk([]string{dir}, nil, 4, func(Match) {
		if n++; n%10_000 == 0 {
			peak = max(peak, live())
		}
	}, func(err error) { t.Error(err) })
	if n != 200_000 {
		t.Fatalf("%d keys found; want 200,000", n)
	}
	// 4 workers' chunks (1 MiB), 8 files read ahead holding 256 keys each
	// (about 0.3 MB), and slack.
	const bound = 4 << 20
	if peak > before && peak-before > bound {
		t.Errorf("the live heap grew by %d bytes while keys were reported; want at most %d", peak-before, bound)
	}
}

// A file that starts with a UTF-16 byte order mark (PowerShell's Out-File)
// is read as the text it encodes, with the lines and columns of that text;
// without a mark it is binary.
func TestReaderUTF16(t *testing.T) {
	k := newKey(t)
	text := "first\r\nsecond line\r\n\tKEY=" + k + " # é\r\n"
	for name, enc := range map[string]func(string) []byte{
		"LE": func(s string) []byte { return utf16Bytes(s, binary.LittleEndian, true) },
		"BE": func(s string) []byte { return utf16Bytes(s, binary.BigEndian, true) },
	} {
		data := enc(text)
		for _, size := range []int{4 * btk.KeyLen, chunkSize} {
			var got []Match
			err := Reader(iotest.HalfReader(bytes.NewReader(data)), "x", make([]byte, size), true, func(m Match) { got = append(got, m) })
			if err != nil || len(got) != 1 || got[0] != (Match{"x", 3, 6, k, false}) {
				t.Errorf("%s, chunk %d: %v %+v", name, size, err, got)
			}
		}
		// An odd last byte is not an error; keys before it are found.
		var got []Match
		if err := Reader(bytes.NewReader(append(data, 'x')), "x", nil, true, func(m Match) { got = append(got, m) }); err != nil || len(got) != 1 {
			t.Errorf("%s with an odd byte at the end: %v %+v", name, err, got)
		}
	}
	noBOM := utf16Bytes(text, binary.LittleEndian, false)
	if err := Reader(bytes.NewReader(noBOM), "x", nil, true, func(Match) {}); err != ErrBinary {
		t.Errorf("UTF-16 without a byte order mark: %v; want ErrBinary", err)
	}
	// Decoded text holding NUL characters is binary too.
	if err := Reader(bytes.NewReader(utf16Bytes("\x00\x00"+k, binary.LittleEndian, true)), "x", nil, true, func(Match) {}); err != ErrBinary {
		t.Errorf("UTF-16 of NULs: %v; want ErrBinary", err)
	}
}

func utf16Bytes(s string, order binary.AppendByteOrder, bom bool) []byte {
	var out []byte
	if bom {
		out = order.AppendUint16(out, 0xFEFF)
	}
	for _, u := range utf16.Encode([]rune(s)) {
		out = order.AppendUint16(out, u)
	}
	return out
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
