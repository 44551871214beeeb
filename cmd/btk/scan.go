package main

import (
	"fmt"
	"os"
	"path"
	"strings"
	"sync"

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
	// Revoked is set on an ACTIVE key that --revoke revoked.
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

--check asks the server about each key by its SHA-256 (the plaintext is never
sent) and marks it ACTIVE, REVOKED, EXPIRED or UNKNOWN (not a key you can
see). --revoke also revokes the active ones, after confirmation on a terminal
or with --yes.

Known fake or revoked keys (test fixtures, examples): mark the line with
"btk:allow" (in a comment), or skip paths with --exclude. A marked key is not
reported, unless --check finds it active.

Exit status: 0 when nothing was found (with --check: nothing active), 9
otherwise; so it fits a pre-commit hook or a CI step (docs/leaks.md).`,
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
	res := keyscan.Paths(files, opts.exclude, 0)
	if stdin {
		err := keyscan.Reader(f.io.In, "-", nil, false, func(m keyscan.Match) { res.Matches = append(res.Matches, m) })
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
	}
	for _, err := range res.Errors {
		fmt.Fprintf(f.io.ErrOut, "btk: %v\n", err)
	}
	findings := make([]scanFinding, len(res.Matches))
	for i, m := range res.Matches {
		findings[i] = scanFinding{Path: m.Path, Line: m.Line, Column: m.Column, DisplayPrefix: m.DisplayPrefix(), Hint: m.Hint()}
	}
	var p *printer
	var c *client.Client
	keys := map[string]*client.ApiKeyByHashApiKeyByHashApiKey{}
	if opts.check && len(res.Matches) > 0 {
		var err error
		if _, p, c, err = f.connect(cmd); err != nil {
			return err
		}
		if keys, err = lookUpKeys(cmd, c, res.Matches); err != nil {
			return err
		}
		for i, m := range res.Matches {
			findings[i].Status = scanUnknown
			if k := keys[m.Key]; k != nil {
				findings[i].Status = string(k.Status)
			}
		}
	}
	res.Matches, findings = dropAllowed(res.Matches, findings)
	if opts.revoke && len(res.Matches) > 0 {
		if err := revokeFound(cmd, opts, c, res.Matches, keys, findings); err != nil {
			return err
		}
	}
	if p == nil {
		var err error
		if p, err = f.printer(cmd); err != nil {
			return err
		}
	}
	if p.format == formatJSON {
		if err := p.JSON(findings); err != nil {
			return err
		}
	} else {
		for i, fd := range findings {
			line := fmt.Sprintf("%s:%d:%d: %s", fd.Path, fd.Line, fd.Column, res.Matches[i].Display())
			if fd.Status != "" {
				line += "  " + p.Status(fd.Status)
				if fd.Revoked {
					line += " (revoked now)"
				}
				if k := keys[res.Matches[i].Key]; k != nil {
					line += "  " + k.Name
				}
			}
			fmt.Fprintln(f.io.Out, line)
		}
	}
	return scanOutcome(findings, opts.check)
}

// dropAllowed leaves out the keys marked keyscan.AllowMarker, known to be
// fake or revoked, unless --check found them active: a marker never hides a
// live key.
func dropAllowed(matches []keyscan.Match, findings []scanFinding) ([]keyscan.Match, []scanFinding) {
	n := 0
	for i, m := range matches {
		if !m.Allowed || findings[i].Status == scanActive {
			matches[n], findings[n] = m, findings[i]
			n++
		}
	}
	return matches[:n], findings[:n]
}

// scanOutcome is nil (exit 0) when nothing was found, or with check nothing
// active; a keysFoundError (exit 9) otherwise.
func scanOutcome(findings []scanFinding, check bool) error {
	if len(findings) == 0 {
		return nil
	}
	distinct := map[string]bool{}
	active := 0
	for _, fd := range findings {
		distinct[fd.DisplayPrefix+fd.Hint] = true
		if fd.Status == scanActive {
			active++
		}
	}
	if !check {
		return &keysFoundError{fmt.Sprintf("found %d API key(s) in %d place(s)", len(distinct), len(findings))}
	}
	if active == 0 {
		return nil
	}
	return &keysFoundError{fmt.Sprintf("found %d place(s) holding an active API key", active)}
}

// lookUpKeys asks apiKeyByHash about each distinct key, a few at once; the
// plaintext is hashed here and never sent.
func lookUpKeys(cmd *cobra.Command, c *client.Client, matches []keyscan.Match) (map[string]*client.ApiKeyByHashApiKeyByHashApiKey, error) {
	out := map[string]*client.ApiKeyByHashApiKeyByHashApiKey{}
	var distinct []string
	for _, m := range matches {
		if _, ok := out[m.Key]; !ok {
			out[m.Key] = nil
			distinct = append(distinct, m.Key)
		}
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		sem      = make(chan struct{}, 4)
	)
	for _, key := range distinct {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			resp, err := client.ApiKeyByHash(cmd.Context(), c, client.KeyHash(key))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			out[key] = resp.ApiKeyByHash
		})
	}
	wg.Wait()
	return out, firstErr
}

// revokeFound revokes the active keys found, after confirmation.
func revokeFound(cmd *cobra.Command, opts *scanOptions, c *client.Client, matches []keyscan.Match,
	keys map[string]*client.ApiKeyByHashApiKeyByHashApiKey, findings []scanFinding) error {
	f := opts.f
	var active []*client.ApiKeyByHashApiKeyByHashApiKey
	seen := map[string]bool{}
	for _, m := range matches {
		if k := keys[m.Key]; k != nil && string(k.Status) == scanActive && !seen[k.Id] {
			seen[k.Id] = true
			active = append(active, k)
		}
	}
	if len(active) == 0 {
		return nil
	}
	if !opts.yes {
		names := make([]string, len(active))
		for i, k := range active {
			names[i] = fmt.Sprintf("%q (%s)", k.Name, keyDisplay(k.ApiKey))
		}
		err := f.io.confirm(fmt.Sprintf("Revoke %d active key(s): %s? Requests with them will fail at once.",
			len(active), strings.Join(names, ", ")), "nothing was revoked")
		if err != nil {
			return err
		}
	}
	revoked := map[string]bool{}
	for _, k := range active {
		if _, err := client.RevokeApiKey(cmd.Context(), c, k.Id); err != nil {
			return fmt.Errorf("revoking key %q: %w", k.Name, err)
		}
		revoked[k.Id] = true
		fmt.Fprintf(f.io.ErrOut, "Revoked key %q\n", k.Name)
	}
	for i, m := range matches {
		if k := keys[m.Key]; k != nil && revoked[k.Id] {
			findings[i].Revoked = true
		}
	}
	return nil
}
