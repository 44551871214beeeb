package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type auditOptions struct {
	f         *factory
	workspace string
	key       string
	action    string
	actor     string
	since     string
	until     string
	limit     int
}

func newAuditCmd(f *factory) *cobra.Command {
	opts := &auditOptions{f: f}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the API key audit log, newest first",
		Long: `Show who created, rotated and revoked keys, when, from where and with which
client: the key-specific audit log, newest first. Owners see their workspace; a
platform admin may read any workspace with --workspace (a name or an id).

--key takes a key id or a key's name: the key of that name that is not
revoked, or, when every key of that name is revoked, the newest of them. It
shows the key's whole history across rotations: the entries of every key it replaced and of the keys that
replaced it. Each row shows the key's name at the time, so after
'rotate --name' older rows keep the old name; the KEY ID column tells the keys
of a chain apart.

Logins, elevations, impersonations and changes to memberships, plans, limits
and accounts are in 'btk events'.`,
		Example: `  btk audit --since 24h
  btk audit --key payments-backend              # one key's history, across rotations
  btk audit --actor ops@example.com --since 7d --until 1d
  btk audit --workspace Acme --since 2026-11-01T00:00:00Z --limit 500 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAudit(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.workspace, "workspace", "", "`workspace` (name or id) to read; your own by default")
	fl.StringVar(&opts.key, "key", "", "only entries about this `KEY` and its rotations (id or name; a name whose keys are all revoked means its newest key)")
	fl.StringVar(&opts.action, "action", "", "only this `action`: created, rotated, revoked or revoked_all")
	fl.StringVar(&opts.actor, "actor", "", "only entries by the account with this `email`")
	fl.StringVar(&opts.since, "since", "", "only entries since this `time`: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.StringVar(&opts.until, "until", "", "only entries before this `time`: a duration ago (1h, 2d) or an RFC 3339 time")
	fl.IntVar(&opts.limit, "limit", 50, "show at most this many entries")
	cmd.AddCommand(newAuditVerifyCmd(f))
	cmd.RegisterFlagCompletionFunc("action", fixedCompletion(enumNames(client.AllApiKeyAuditAction)...))
	cmd.RegisterFlagCompletionFunc("key", f.completeKeys)
	cmd.RegisterFlagCompletionFunc("workspace", f.completeWorkspaces)
	return cmd
}

// timeRange parses --since and --until.
func timeRange(f *factory, since, until string, filter *client.AuditFilter) error {
	if since != "" {
		t, err := parseSince("--since", since, f.now())
		if err != nil {
			return err
		}
		filter.Since = &t
	}
	if until != "" {
		t, err := parseSince("--until", until, f.now())
		if err != nil {
			return err
		}
		filter.Until = &t
	}
	return nil
}

func runAudit(cmd *cobra.Command, opts *auditOptions) error {
	f := opts.f
	var filter client.AuditFilter
	if opts.limit < 1 {
		return usageErrorf("--limit must be at least 1")
	}
	if opts.action != "" {
		a, err := parseAction(opts.action)
		if err != nil {
			return err
		}
		filter.Action = &a
	}
	if err := timeRange(f, opts.since, opts.until, &filter); err != nil {
		return err
	}
	filter.ActorEmail = optional(opts.actor)
	p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if opts.workspace != "" {
		id, err := client.ResolveWorkspaceID(ctx, c, opts.workspace)
		if err != nil {
			return err
		}
		filter.WorkspaceID = &id
	}
	if opts.key != "" {
		id := opts.key
		if !client.IsID(id) {
			if opts.workspace != "" {
				// Names resolve in the caller's own workspace only.
				return usageErrorf("--key takes a key id, not a name, together with --workspace")
			}
			k, err := client.ResolveKeyForAudit(ctx, c, id)
			if err != nil {
				return err
			}
			id = k.Id
		}
		filter.ApiKeyID = &id
	}
	entries, more, err := client.AuditLog(ctx, c, filter, opts.limit)
	if err != nil {
		return err
	}
	return printLog(f, p, entries, more, opts.limit, "No audit entries match", "entries", p.auditTable)
}

// printLog prints one page of a log (audit, events, deliveries) with
// printList and, when the server had more than limit, limitNote.
func printLog[T any](f *factory, p *printer, items []T, more bool, limit int, none, what string, table func([]T)) error {
	err := printList(p, items, none, table)
	if more {
		limitNote(f, limit, what)
	}
	return err
}

// limitNote tells, on stderr whatever the format, that --limit cut a list.
func limitNote(f *factory, limit int, what string) {
	fmt.Fprintf(f.io.ErrOut, "btk: showing the newest %d %s; more match: raise --limit or narrow with --since/--until\n", limit, what)
}
