package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
	"github.com/btk-project/btk/internal/keyscan"
)

type scanOptions struct {
	f       *factory
	paths   []string
	exclude []string
	check   bool
	revoke  bool
	yes     bool
}

// scanFinding is one key found, as -o json shows it: never the key itself.
type scanFinding struct {
	Path          string `json:"path"`
	Line          int    `json:"line"`
	Column        int    `json:"column"`
	DisplayPrefix string `json:"displayPrefix"`
	Hint          string `json:"hint"`
	Status        string `json:"status,omitempty"`
	// Revoked is set on the places of an ACTIVE key that --revoke --yes
	// revoked (at its first place; on a terminal btk asks after the scan).
	Revoked bool `json:"revoked,omitempty"`
}

// Statuses of a key found by btk scan --check.
const (
	scanUnknown = "UNKNOWN"
	scanActive  = string(client.ApiKeyStatusActive)
)

func newScanCmd(f *factory) *cobra.Command {
	opts := &scanOptions{f: f}
	cmd := &cobra.Command{
		Use:   "scan [PATH...]",
		Short: "Find btk API keys in files, directories or standard input",
		Long: `Find btk API keys in files and directories (recursively, skipping .git and
binary files; "." when no PATH is given) or in standard input ("-"). Each key
found is printed as file:line:column with its display prefix and hint, never
the whole key.

Files in UTF-16 with a byte order mark (PowerShell's Out-File) are read as
the text they hold. Places are printed as they are found, in the order of the
walk, so memory stays bounded however many keys there are.

--check asks the server about each key by its SHA-256 (the plaintext is never
sent) and marks it ACTIVE, REVOKED, EXPIRED or UNKNOWN (not a key you can
see); past 10,000 different keys the others are not asked about and marked
UNCHECKED. --revoke also revokes the active ones: with --yes at once, on a
terminal after asking, once every place is printed.

Known fake or revoked keys (test fixtures, examples): mark the line with
"btk:allow" (in a comment), or skip paths with --exclude. A marked key is not
reported, unless --check finds it active.

Exit status: 0 when nothing was found (with --check: nothing active or
unchecked), 9 otherwise; so it fits a pre-commit hook or a CI step (docs/leaks.md).`,
		Example: `  btk scan                               # the current directory
  btk scan src/ config/prod.env
  git diff --cached --name-only -z | xargs -0 -r btk scan
  btk scan --exclude testdata --exclude '*.golden'
  kubectl logs deploy/api | btk scan - --check
  btk scan . --check --revoke --yes -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.paths = args
			return runScan(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&opts.exclude, "exclude", nil, "skip files and directories whose name (or path, for a `GLOB` with a /) matches (repeatable)")
	fl.BoolVar(&opts.check, "check", false, "ask the server whether each key is active (by hash)")
	fl.BoolVar(&opts.revoke, "revoke", false, "revoke the active keys found (implies --check)")
	fl.BoolVarP(&opts.yes, "yes", "y", false, "revoke without asking for confirmation")
	return cmd
}

// maxScanKeys bounds the different keys btk scan remembers (by hash): to
// count them and, with --check, the server's answers about them. Past it
// a key is counted as a place only and, with --check, reported UNCHECKED:
// memory stays bounded however many keys a file holds (docs/leaks.md). A
// var: tests lower it.
var maxScanKeys = 10_000

// scanUnchecked is the status of a key found past maxScanKeys different
// ones: not asked about, so it may be active (exit 9, whatever its marker).
const scanUnchecked = "UNCHECKED"

// scanKey is one key found, by hash (the plaintext is not held): what the
// server said about it (--check) and what was done with it.
type scanKey struct {
	ready    chan struct{} // closed once key and err are set (--check)
	key      *client.ApiKeyByHashApiKeyByHashApiKey
	err      error
	reported bool // a place of it was printed
	revoked  bool // --revoke --yes revoked it
}

// scanItem is a place the walk found, or a file it could not read, on its
// way to the reporter; key is nil past maxScanKeys.
type scanItem struct {
	finding scanFinding
	allowed bool
	key     *scanKey
	err     error
}

// scanRun streams what a scan finds to the output as it is found, in the
// walk's order: nothing is held per place, only per different key up to
// maxScanKeys (docs/leaks.md#how-fast-btk-scan-is).
type scanRun struct {
	opts *scanOptions
	cmd  *cobra.Command
	p    *printer
	c    *client.Client // with --check

	// Written by the walk (add), read by the reporter once the walk is over.
	keys    map[[sha256.Size]byte]*scanKey
	order   []*scanKey // keys in the order first found
	lookups chan scanLookup
	failed  atomic.Bool // a lookup failed: ask nothing more

	// The reporter's.
	json                                *jsonArray
	err                                 error // the first failure: nothing more is printed
	places, distinct, active, unchecked int
	uncounted                           bool // a place of a key past maxScanKeys was reported
}

type scanLookup struct {
	key  *scanKey
	hash string
}

func runScan(cmd *cobra.Command, opts *scanOptions) error {
	f := opts.f
	if opts.revoke {
		opts.check = true
	}
	paths := opts.paths
	if len(paths) == 0 {
		paths = []string{"."}
	}
	stdin := false
	var files []string
	for _, p := range paths {
		if p == "-" {
			stdin = true
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			return usageErrorf("%s: no such file or directory", p)
		}
		files = append(files, p)
	}
	if opts.revoke && !opts.yes && (stdin || !f.io.canPrompt()) {
		return usageErrorf("refusing to revoke without confirmation: pass --yes (there is no terminal to ask)")
	}
	for _, pat := range opts.exclude {
		if _, err := path.Match(pat, ""); err != nil {
			return usageErrorf("--exclude %q: not a valid glob", pat)
		}
	}
	s := &scanRun{opts: opts, cmd: cmd, keys: map[[sha256.Size]byte]*scanKey{}}
	var err error
	if opts.check {
		// Connected before the walk, as the other commands connect first.
		if _, s.p, s.c, err = f.connect(cmd); err != nil {
			return err
		}
	} else if s.p, err = f.printer(cmd); err != nil {
		return err
	}
	if s.p.format == formatJSON {
		s.json = s.p.jsonArray()
	}
	// The walk feeds the reporter through a bounded queue: a slow output
	// or server holds the walk back rather than filling memory.
	queue := make(chan scanItem, 1024)
	var lookups sync.WaitGroup
	if opts.check {
		s.lookups = make(chan scanLookup, 64)
		for range 4 { // a few requests at once
			lookups.Go(s.lookUp)
		}
	}
	go func() {
		defer close(queue)
		add := func(m keyscan.Match) { queue <- s.add(m) }
		keyscan.Walk(files, opts.exclude, 0, add, func(err error) { queue <- scanItem{err: err} })
		if stdin {
			if err := keyscan.Reader(f.io.In, "-", nil, false, add); err != nil {
				queue <- scanItem{err: fmt.Errorf("reading standard input: %w", err)}
			}
		}
		if s.lookups != nil {
			close(s.lookups)
		}
	}()
	for it := range queue {
		s.report(it)
	}
	lookups.Wait()
	if s.json != nil {
		if err := s.json.close(); err != nil && s.err == nil {
			s.err = err
		}
	}
	if s.err != nil {
		return s.err
	}
	if opts.revoke && !opts.yes {
		if err := s.revokeConfirmed(); err != nil {
			return err
		}
	}
	return s.outcome()
}

// add is one key found by the walk: its place, with the key it is (asked
// about once, with --check) while fewer than maxScanKeys are known.
func (s *scanRun) add(m keyscan.Match) scanItem {
	it := scanItem{
		finding: scanFinding{Path: m.Path, Line: m.Line, Column: m.Column, DisplayPrefix: m.DisplayPrefix(), Hint: m.Hint()},
		allowed: m.Allowed,
	}
	h := sha256.Sum256([]byte(m.Key))
	k, ok := s.keys[h]
	if !ok && len(s.keys) < maxScanKeys {
		k = &scanKey{}
		s.keys[h] = k
		s.order = append(s.order, k)
		if s.lookups != nil {
			k.ready = make(chan struct{})
			s.lookups <- scanLookup{k, hex.EncodeToString(h[:])} // client.KeyHash, from the hash at hand
		}
	}
	it.key = k
	return it
}

// lookUp asks apiKeyByHash about the keys queued, until the walk ends; the
// plaintext is never sent. After a failure it asks nothing more.
func (s *scanRun) lookUp() {
	for l := range s.lookups {
		if s.failed.Load() {
			l.key.err = errScanStopped
		} else {
			resp, err := client.ApiKeyByHash(s.cmd.Context(), s.c, l.hash)
			if err != nil {
				s.failed.Store(true)
				l.key.err = err
			} else {
				l.key.key = resp.ApiKeyByHash
			}
		}
		close(l.key.ready)
	}
}

// errScanStopped marks the keys not asked about after a lookup failed; the
// reporter has stopped at that failure before it reads them.
var errScanStopped = errors.New("not asked: an earlier lookup failed")

// report prints one place (or error) of the walk, as it comes; with
// --revoke --yes an active key is revoked at its first place.
func (s *scanRun) report(it scanItem) {
	if s.err != nil {
		return // draining the queue after a failure
	}
	f := s.opts.f
	if it.err != nil {
		fmt.Fprintf(f.io.ErrOut, "btk: %v\n", it.err)
		return
	}
	fd := it.finding
	var k *client.ApiKeyByHashApiKeyByHashApiKey
	if s.opts.check {
		fd.Status = scanUnchecked
		if it.key != nil {
			<-it.key.ready
			if it.key.err != nil {
				s.err = it.key.err
				return
			}
			fd.Status = scanUnknown
			if k = it.key.key; k != nil {
				fd.Status = string(k.Status)
			}
		}
	}
	// A marker vouches for a fake or revoked key, never for one that is,
	// or may be, active.
	if it.allowed && fd.Status != scanActive && fd.Status != scanUnchecked {
		return
	}
	s.places++
	switch {
	case it.key == nil:
		s.uncounted = true
	case !it.key.reported:
		it.key.reported = true
		s.distinct++
	}
	switch fd.Status {
	case scanActive:
		s.active++
		if s.opts.revoke && s.opts.yes && !it.key.revoked {
			if _, err := client.RevokeApiKey(s.cmd.Context(), s.c, k.Id); err != nil {
				s.err = fmt.Errorf("revoking key %q: %w", printable(k.Name), err)
				return
			}
			it.key.revoked = true
			fmt.Fprintf(f.io.ErrOut, "Revoked key %q\n", printable(k.Name))
		}
		fd.Revoked = it.key.revoked
	case scanUnchecked:
		s.unchecked++
	}
	if s.json != nil {
		if err := s.json.add(fd); err != nil {
			s.err = err
		}
		return
	}
	line := fmt.Sprintf("%s:%d:%d: %s_…%s", fd.Path, fd.Line, fd.Column, fd.DisplayPrefix, fd.Hint)
	if fd.Status != "" {
		line += "  " + s.p.Status(fd.Status)
		if fd.Revoked {
			line += " (revoked now)"
		}
		if k != nil {
			line += "  " + printable(k.Name)
		}
	}
	fmt.Fprintln(f.io.Out, line)
}

// outcome is nil (exit 0) when nothing was found, or with --check nothing
// active or unchecked; a keysFoundError (exit 9) otherwise.
func (s *scanRun) outcome() error {
	if s.places == 0 {
		return nil
	}
	if !s.opts.check {
		if s.uncounted {
			return &keysFoundError{fmt.Sprintf("found more than %d different API keys in %d place(s)", maxScanKeys, s.places)}
		}
		return &keysFoundError{fmt.Sprintf("found %d API key(s) in %d place(s)", s.distinct, s.places)}
	}
	var said []string
	if s.active > 0 {
		said = append(said, fmt.Sprintf("found %d place(s) holding an active API key", s.active))
	}
	if s.unchecked > 0 {
		said = append(said, fmt.Sprintf("%d place(s) hold keys past the first %d different ones, not checked (UNCHECKED)", s.unchecked, maxScanKeys))
	}
	if len(said) == 0 {
		return nil
	}
	return &keysFoundError{strings.Join(said, "; ")}
}

// revokeConfirmed revokes the active keys found, after one confirmation on
// the terminal, once every place has been printed.
func (s *scanRun) revokeConfirmed() error {
	f := s.opts.f
	var active []*scanKey
	for _, k := range s.order {
		if k.reported && k.key != nil && string(k.key.Status) == scanActive {
			active = append(active, k)
		}
	}
	if len(active) == 0 {
		return nil
	}
	names := make([]string, len(active))
	for i, k := range active {
		names[i] = fmt.Sprintf("%q (%s)", printable(k.key.Name), keyDisplay(k.key.ApiKey))
	}
	err := f.io.confirm(fmt.Sprintf("Revoke %d active key(s): %s? Requests with them will fail at once.",
		len(active), strings.Join(names, ", ")), "nothing was revoked")
	if err != nil {
		return err
	}
	for _, k := range active {
		if _, err := client.RevokeApiKey(s.cmd.Context(), s.c, k.key.Id); err != nil {
			return fmt.Errorf("revoking key %q: %w", printable(k.key.Name), err)
		}
		fmt.Fprintf(f.io.ErrOut, "Revoked key %q\n", printable(k.key.Name))
	}
	return nil
}
