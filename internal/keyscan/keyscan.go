// Package keyscan finds btk API keys in bytes, files and directory trees,
// fast: a byte search for "btk_" and then the strict shape of a key
// (btk.WellFormedKey) with a boundary on each side; files are read in
// parallel, in bounded chunks. It is what `btk scan` and `btk whois` use
// (docs/leaks.md).
package keyscan

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/btk-project/btk/internal/btk"
)

// Match is one key found: where (1-based line, and 1-based byte column) and
// the key itself. The key stays in memory: print only Display.
type Match struct {
	Path   string
	Line   int
	Column int
	Key    string
	// Allowed reports AllowMarker on the key's line.
	Allowed bool
}

// AllowMarker on a key's line marks the key as known to be fake or revoked
// (docs/leaks.md#known-keys-btkallow-and---exclude). A line longer than a
// chunk is looked at only as far as the chunk read holds it: a marker
// further away is missed and the key reported, never the other way.
const AllowMarker = "btk:allow"

var allowMarker = []byte(AllowMarker)

// DisplayPrefix is "btk_" and the workspace prefix of the key.
func (m Match) DisplayPrefix() string { return m.Key[:btk.DisplayPrefixLen] }

// Hint is the key's last four characters.
func (m Match) Hint() string { return m.Key[len(m.Key)-4:] }

// Display is how a key may be shown: its display prefix and hint only.
func (m Match) Display() string { return m.DisplayPrefix() + "_…" + m.Hint() }

var prefix = []byte(btk.KeyPrefix)

// binarySniff is how much of a file's start is looked at for a NUL byte
// (git's heuristic for binary files).
const binarySniff = 8000

// chunkSize is what one worker reads at a time.
const chunkSize = 256 << 10

// ErrBinary is returned by Reader for input that looks binary.
var ErrBinary = errors.New("binary file")

// Reader scans r for keys, reading chunks into buf (nil: a new one), and
// calls fn for each in order. With skipBinary, input whose first 8,000
// bytes hold a NUL byte is ErrBinary.
func Reader(r io.Reader, path string, buf []byte, skipBinary bool, fn func(Match)) error {
	if len(buf) < 4*btk.KeyLen {
		buf = make([]byte, chunkSize)
	}
	var (
		start     int64 // absolute offset of buf[0]
		keep      int   // bytes carried over at buf[:keep]
		from      int   // where the search starts in this chunk
		line      = 1
		lineStart int64 // absolute offset of the current line's start
		counted   int   // newlines are counted up to here in this chunk
		first     = true
		// Whether the line at markLine (an absolute offset), as far as
		// the chunk at markStart holds it, carries AllowMarker: looked at
		// once per line and chunk, however many keys the line holds.
		markLine, markStart = int64(-1), int64(-1)
		marked              bool
	)
	for {
		n, err := io.ReadFull(r, buf[keep:])
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		data := buf[:keep+n]
		if first {
			first = false
			if skipBinary && bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
				return ErrBinary
			}
		}
		// A match starting before limit can be decided in this chunk: the
		// key and the byte after it are here (or the input ends).
		limit := len(data) - btk.KeyLen
		if eof {
			limit = len(data)
		}
		for i := from; i < limit; {
			j := bytes.Index(data[i:], prefix)
			if j < 0 {
				break
			}
			p := i + j
			if p >= limit {
				break
			}
			end := p + btk.KeyLen
			if end <= len(data) && (p > 0 && !btk.KeyChar(data[p-1]) || p == 0 && start == 0) &&
				(end == len(data) || !btk.KeyChar(data[end])) && btk.WellFormedKeyBytes(data[p:end]) {
				seg := data[counted:p]
				if nl := bytes.Count(seg, []byte{'\n'}); nl > 0 {
					line += nl
					lineStart = start + int64(counted+bytes.LastIndexByte(seg, '\n')+1)
				}
				counted = p
				if markLine != lineStart || markStart != start {
					ls := max(lineStart-start, 0)
					le := bytes.IndexByte(data[end:], '\n')
					if le < 0 {
						le = len(data) - end
					}
					markLine, markStart = lineStart, start
					marked = bytes.Contains(data[ls:end+le], allowMarker)
				}
				fn(Match{Path: path, Line: line, Column: int(start+int64(p)-lineStart) + 1, Key: string(data[p:end]), Allowed: marked})
				i = end
				continue
			}
			i = p + 1
		}
		if eof {
			return nil
		}
		// Carry the undecided tail over, with the byte before it (the
		// boundary of a key that starts there).
		carry := max(limit-1, 0)
		seg := data[counted:carry]
		if nl := bytes.Count(seg, []byte{'\n'}); nl > 0 {
			line += nl
			lineStart = start + int64(counted+bytes.LastIndexByte(seg, '\n')+1)
		}
		keep = copy(buf, data[carry:])
		start += int64(carry)
		counted, from = 0, 1
		if carry == 0 {
			from = 0
		}
	}
}

// Result is what a tree scan found.
type Result struct {
	Matches []Match
	Files   int   // files read (binary files skipped included)
	Bytes   int64 // bytes read
	Skipped int   // binary files skipped
	Errors  []error
}

// Paths scans files and directories (recursively, skipping .git directories,
// binary files, anything that is not a regular file, and the paths that
// exclude names: see Excluded) with workers readers at once (0: twice the
// CPUs). Matches come sorted by path, line and column.
func Paths(paths, exclude []string, workers int) Result {
	if workers <= 0 {
		workers = 2 * runtime.GOMAXPROCS(0)
	}
	files := make(chan string, 256)
	var res Result
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, chunkSize)
			var local []Match
			var n int
			var size int64
			var skipped int
			var errs []error
			for path := range files {
				f, err := os.Open(path) // #nosec G304 -- btk scan reads the files its user names: that is its job
				if err != nil {
					errs = append(errs, err)
					continue
				}
				cr := &countingReader{r: f}
				err = Reader(cr, path, buf, true, func(m Match) { local = append(local, m) })
				_ = f.Close()
				n++
				size += cr.n
				switch {
				case errors.Is(err, ErrBinary):
					skipped++
				case err != nil:
					errs = append(errs, &fs.PathError{Op: "read", Path: path, Err: err})
				}
			}
			mu.Lock()
			res.Matches = append(res.Matches, local...)
			res.Files += n
			res.Bytes += size
			res.Skipped += skipped
			res.Errors = append(res.Errors, errs...)
			mu.Unlock()
		})
	}
	var walkErrs []error
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				walkErrs = append(walkErrs, err)
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if Excluded(path, exclude) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				if d.Name() == ".git" && path != root {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				files <- path
			}
			return nil
		})
		if err != nil {
			walkErrs = append(walkErrs, err)
		}
	}
	close(files)
	wg.Wait()
	res.Errors = append(res.Errors, walkErrs...)
	sort.Slice(res.Matches, func(i, j int) bool {
		a, b := res.Matches[i], res.Matches[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return res
}

// Excluded reports whether one of the glob patterns (path.Match) names
// path: a pattern without a slash matches any one element of the path (a
// file or directory name: "testdata", "*.txtar"), one with a slash the
// path or one of its leading directories ("cmd/btk/testdata"), so that a
// file named on the command line is excluded as it would be in a walk of
// its tree. Patterns must be valid (see path.Match).
func Excluded(name string, patterns []string) bool {
	if len(patterns) == 0 {
		return false
	}
	p := filepath.ToSlash(filepath.Clean(name))
	for _, pat := range patterns {
		pat = strings.TrimSuffix(filepath.ToSlash(pat), "/")
		if !strings.Contains(pat, "/") {
			for _, elem := range strings.Split(p, "/") {
				if ok, _ := pathpkg.Match(pat, elem); ok {
					return true
				}
			}
			continue
		}
		for i := range len(p) + 1 {
			if i == len(p) || p[i] == '/' {
				if ok, _ := pathpkg.Match(pat, p[:i]); ok {
					return true
				}
			}
		}
	}
	return false
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
