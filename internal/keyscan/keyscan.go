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
	"strings"
	"sync"

	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"

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

// UTF-16 byte order marks: PowerShell's Out-File and > write UTF-16 LE with
// one, and every other byte of its ASCII text is a NUL (docs/leaks.md).
var (
	bomLE = []byte{0xFF, 0xFE}
	bomBE = []byte{0xFE, 0xFF}
)

// Reader scans r for keys, reading chunks into buf (nil: a new one), and
// calls fn for each in order. Input that starts with a UTF-16 byte order
// mark is decoded to UTF-8 first: lines and columns are then those of the
// decoded text. With skipBinary, input whose first 8,000 bytes (decoded)
// hold a NUL byte is ErrBinary.
func Reader(r io.Reader, path string, buf []byte, skipBinary bool, fn func(Match)) error {
	if len(buf) < 4*btk.KeyLen {
		buf = make([]byte, chunkSize)
	}
	n, err := io.ReadFull(r, buf)
	if bytes.HasPrefix(buf[:n], bomLE) || bytes.HasPrefix(buf[:n], bomBE) {
		// The chunk read goes through the decoder again, from a copy: buf
		// holds the decoded text from here on.
		dec := unicode.UTF16(unicode.LittleEndian, unicode.ExpectBOM).NewDecoder()
		rest := r
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			rest = eofReader{io.EOF}
		case err != nil:
			rest = eofReader{err} // after the bytes read, as r gave them
		}
		r = transform.NewReader(io.MultiReader(bytes.NewReader(bytes.Clone(buf[:n])), rest), dec)
		n, err = io.ReadFull(r, buf)
	}
	var (
		start     int64 // absolute offset of buf[0]
		keep      int   // bytes carried over at buf[:keep]
		from      int   // where the search starts in this chunk
		line      = 1
		lineStart int64 // absolute offset of the current line's start
		counted   int   // newlines are counted up to here in this chunk
		// Whether the line at markLine (an absolute offset), as far as
		// the chunk at markStart holds it, carries AllowMarker: looked at
		// once per line and chunk, however many keys the line holds.
		markLine, markStart = int64(-1), int64(-1)
		marked              bool
	)
	if skipBinary && bytes.IndexByte(buf[:min(n, binarySniff)], 0) >= 0 {
		return ErrBinary
	}
	for ; ; n, err = io.ReadFull(r, buf[keep:]) {
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		data := buf[:keep+n]
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

// Stats counts what a tree scan read.
type Stats struct {
	Files   int   // files read (binary files skipped included)
	Bytes   int64 // bytes read
	Skipped int   // binary files skipped
}

// Walk scans files and directories (recursively, skipping .git directories,
// binary files, anything that is not a regular file, and the paths that
// exclude names: see Excluded) with workers readers at once (0: twice the
// CPUs). It calls found for each key and failed for each file or directory
// that cannot be read, one call at a time and in the order of the walk:
// paths as given, each directory in lexical order (filepath.WalkDir), each
// file's keys by position.
//
// Memory stays bounded whatever the number of files and keys
// (docs/leaks.md#how-fast-btk-scan-is): what the file being reported finds
// goes out as it is found; the others, read ahead by the other workers, hold
// at most pendingMatches keys each, then wait their turn; and no worker
// starts a file more than window files ahead of the one being reported.
func Walk(paths, exclude []string, workers int, found func(Match), failed func(error)) Stats {
	if workers <= 0 {
		workers = 2 * runtime.GOMAXPROCS(0)
	}
	o := newOrderer(2*workers, found, failed)
	type job struct {
		seq  int
		path string
	}
	files := make(chan job)
	var st Stats
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, chunkSize)
			var local Stats
			for j := range files {
				local.Files++
				fin, n, skipped := o.scanFile(j.seq, j.path, buf)
				local.Bytes += n
				if skipped {
					local.Skipped++
				}
				o.finish(j.seq, fin)
			}
			mu.Lock()
			st.Files += local.Files
			st.Bytes += local.Bytes
			st.Skipped += local.Skipped
			mu.Unlock()
		})
	}
	seq := 0
	// next is the number of the next file or error of the walk, once the
	// window lets it start.
	next := func() int {
		o.waitWindow(seq)
		seq++
		return seq - 1
	}
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				o.finish(next(), finished{err: err})
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
				files <- job{next(), path}
			}
			return nil
		})
		if err != nil {
			o.finish(next(), finished{err: err})
		}
	}
	close(files)
	wg.Wait()
	return st
}

// pendingMatches is how many keys a file read ahead of the one being
// reported holds before its worker waits its turn.
const pendingMatches = 256

// orderer puts what the workers of Walk find back in the order of the walk:
// file seq's keys go out when every earlier file's have.
type orderer struct {
	mu     sync.Mutex
	turn   *sync.Cond // head or done changed
	head   int        // the file being reported: its keys go out as found
	done   map[int]finished
	window int
	found  func(Match)
	failed func(error)
}

// finished is a file read ahead of its turn: the keys it holds and its error.
type finished struct {
	matches []Match
	err     error
}

func newOrderer(window int, found func(Match), failed func(error)) *orderer {
	o := &orderer{done: map[int]finished{}, window: window, found: found, failed: failed}
	o.turn = sync.NewCond(&o.mu)
	return o
}

// waitWindow waits until file seq may start: less than window files after
// the one being reported.
func (o *orderer) waitWindow(seq int) {
	o.mu.Lock()
	for seq >= o.head+o.window {
		o.turn.Wait()
	}
	o.mu.Unlock()
}

// scanFile reads the file of number seq into buf: its keys are held while
// an earlier file is being reported (up to pendingMatches, then it waits its
// turn) and go out as found once it is its turn. It answers the keys still
// held and the error opening or reading the file (for finish), the bytes
// read, and whether the file was skipped as binary.
func (o *orderer) scanFile(seq int, path string, buf []byte) (finished, int64, bool) {
	f, err := os.Open(path) // #nosec G304 -- btk scan reads the files its user names: that is its job
	if err != nil {
		return finished{err: err}, 0, false
	}
	defer f.Close()
	var held []Match
	ours := false // seq is the head: it stays so until finish
	cr := &countingReader{r: f}
	err = Reader(cr, path, buf, true, func(m Match) {
		if !ours {
			if len(held) < pendingMatches && !o.isHead(seq) {
				held = append(held, m)
				return
			}
			o.waitTurn(seq)
			ours = true
			for _, h := range held {
				o.found(h)
			}
			held = nil
		}
		o.found(m)
	})
	switch {
	case errors.Is(err, ErrBinary):
		return finished{}, cr.n, true
	case err != nil:
		return finished{held, &fs.PathError{Op: "read", Path: path, Err: err}}, cr.n, false
	}
	return finished{matches: held}, cr.n, false
}

func (o *orderer) isHead(seq int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.head == seq
}

func (o *orderer) waitTurn(seq int) {
	o.mu.Lock()
	for o.head != seq {
		o.turn.Wait()
	}
	o.mu.Unlock()
}

// finish ends file (or walk error) seq: when it is the head, it and the
// finished files after it are reported and the head moves past them; else
// it waits in done for its turn.
func (o *orderer) finish(seq int, fin finished) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq != o.head {
		o.done[seq] = fin
		return
	}
	for {
		for _, m := range fin.matches {
			o.found(m)
		}
		if fin.err != nil {
			o.failed(fin.err)
		}
		o.head++
		next, ok := o.done[o.head]
		if !ok {
			break
		}
		delete(o.done, o.head)
		fin = next
	}
	o.turn.Broadcast()
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

// eofReader is a reader that is at its end, or failed: err.
type eofReader struct{ err error }

func (e eofReader) Read([]byte) (int, error) { return 0, e.err }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
