package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
	"github.com/btk-project/btk/internal/keyscan"
)

// readKeyInput reads the one btk key that standard input holds: typed at a
// prompt without echo on a terminal, or piped (a log line, a file: any text
// that holds exactly one key). The key never comes from an argument, so it
// stays out of shell history and process listings (docs/leaks.md).
//
// Piped input is read to its end in keyscan's bounded chunks, so that a key
// anywhere in it is found and a second, different one anywhere refuses it
// all; reading stops at that second key.
func readKeyInput(s *iostreams) (string, error) {
	in := &stoppableReader{r: s.In}
	if s.canPrompt() {
		text, err := s.promptSecret("API key (not echoed): ")
		if err != nil {
			return "", err
		}
		in.r = strings.NewReader(text)
	}
	var key string
	err := keyscan.Reader(in, "-", nil, false, func(m keyscan.Match) {
		switch {
		case key == "":
			key = m.Key
		case m.Key != key:
			in.stopped = true
		}
	})
	switch {
	case in.stopped:
		return "", usageErrorf("standard input holds more than one key: give one, or use 'btk scan - --check'")
	case err != nil:
		return "", fmt.Errorf("reading standard input: %w", err)
	case key == "":
		return "", usageErrorf("no btk API key on standard input (btk_ followed by 8 hex digits, _ and 43 characters)")
	}
	return key, nil
}

// stoppableReader reads r until stopped is set: then it ends at once.
type stoppableReader struct {
	r       io.Reader
	stopped bool
}

func (s *stoppableReader) Read(p []byte) (int, error) {
	if s.stopped {
		return 0, io.EOF
	}
	return s.r.Read(p)
}

// keyOnInput reads the key on standard input (readKeyInput) and finds it by
// its hash, as whois and 'revoke -' do: the plaintext never leaves this
// machine.
func keyOnInput(ctx context.Context, s *iostreams, c *client.Client) (*client.ApiKeyByHashApiKeyByHashApiKey, error) {
	plaintext, err := readKeyInput(s)
	if err != nil {
		return nil, err
	}
	return client.ResolveKeyBySecret(ctx, c, plaintext)
}

type whoisOptions struct {
	f     *factory
	limit int
}

// whoisResult is the -o json document of whois.
type whoisResult struct {
	ApiKey    *client.ApiKeyByHashApiKeyByHashApiKey `json:"apiKey"`
	CreatedBy string                                 `json:"createdBy"`
	History   []client.AuditEntry                    `json:"history"`
}

func newWhoisCmd(f *factory) *cobra.Command {
	opts := &whoisOptions{f: f}
	cmd := &cobra.Command{
		Use:   "whois",
		Short: "Tell whose API key the one on standard input is",
		Long: `Read an API key from standard input (typed without echo on a terminal, or
piped: any text holding one key, such as a log line, read to its end however
long; a second, different key anywhere is refused), hash it here and ask the
server by the hash: the plaintext never leaves this machine, and never appears
in an argument, shell history or process listing.

Prints the key's workspace, name, id, status, who created it, its last use and
its history across rotations. The owner tier sees its own workspace's keys, a
platform admin any workspace's; any other key is "not found" (exit 5), whether
or not it exists.`,
		Example: `  pbpaste | btk whois
  grep -o 'btk_[^ ]*' app.log | head -1 | btk whois -o json
  btk whois            # then paste the key and press Enter`,
		Args: noArgs,
	}
	connected := f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
		return runWhois(ctx, p, c, opts)
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkLimit(opts.limit); err != nil {
			return err
		}
		return connected(cmd, args)
	}
	cmd.Flags().IntVar(&opts.limit, "limit", 50, "show at most this many history entries (1-100000)")
	return cmd
}

func runWhois(ctx context.Context, p *printer, c *client.Client, opts *whoisOptions) error {
	f := opts.f
	// Connected first: a session that will not do fails before the key is asked for.
	k, err := keyOnInput(ctx, f.io, c)
	if err != nil {
		return err
	}
	res := whoisResult{ApiKey: k, History: []client.AuditEntry{}}
	filter := client.AuditFilter{ApiKeyID: &k.Id}
	if k.Workspace != nil {
		filter.WorkspaceID = &k.Workspace.Id
	}
	history, more, chain, herr := client.AuditLog(ctx, c, filter, opts.limit)
	if herr == nil {
		res.History = history
		for _, e := range history {
			if e.ApiKeyId != nil && *e.ApiKeyId == k.Id && e.Action == client.ApiKeyAuditActionCreated ||
				e.NewApiKeyId != nil && *e.NewApiKeyId == k.Id {
				res.CreatedBy = e.ActorEmail
			}
		}
	}
	if p.format == formatJSON {
		chainNote(f, chain)
		return p.JSON(res)
	}
	var fields []field
	if k.Workspace != nil {
		fields = append(fields, field{"Workspace", k.Workspace.Name + " (" + k.Workspace.Id + ")"})
	}
	fields = append(fields, p.apiKeyFields(k.ApiKey)...)
	created := res.CreatedBy
	if created == "" {
		created = "unknown"
	}
	fields = append(fields, field{"Created by", created})
	p.Fields(fields)
	switch {
	case herr != nil:
		fmt.Fprintf(f.io.ErrOut, "btk: the key's history could not be read: %v\n", herr)
	case len(history) > 0:
		fmt.Fprintln(f.io.Out)
		p.auditTable(history)
	}
	if more {
		limitNote(f, opts.limit, "history entries")
	}
	chainNote(f, chain)
	return nil
}
