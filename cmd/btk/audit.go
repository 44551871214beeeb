package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type auditOptions struct {
	f   *factory
	log logOptions
	key string
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
replaced it, and the revoke-all that revoked one of them. The server follows at most 1,000 keys of the chain
on each side of KEY; a longer chain is cut there, and btk says so on stderr with the key whose history reads
on. Each row shows the key's name at the time, so after
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
	opts.log.addFlags(f, cmd, "entries", "only this `action`: created, rotated, revoked or revoked_all", enumNames(client.AllApiKeyAuditAction))
	cmd.Flags().StringVar(&opts.key, "key", "", "only entries about this `KEY` and its rotations (id or name; a name whose keys are all revoked means its newest key)")
	cmd.AddCommand(newAuditVerifyCmd(f))
	completeFlag(cmd, "key", f.completeKeys)
	return cmd
}

// logOptions are the flags that choose what of a log audit and events show.
type logOptions struct {
	workspace, action, actor, since, until string
	limit                                  int
}

// addFlags adds the log flags to cmd; what names the log's items ("entries",
// "events"); actionHelp and actions are the help and the values of --action.
func (o *logOptions) addFlags(f *factory, cmd *cobra.Command, what, actionHelp string, actions []string) {
	fl := cmd.Flags()
	fl.StringVar(&o.workspace, "workspace", "", "`workspace` (name or id) to read; your own by default")
	fl.StringVar(&o.action, "action", "", actionHelp)
	fl.StringVar(&o.actor, "actor", "", "only "+what+" by the account with this `email`")
	fl.StringVar(&o.since, "since", "", "only "+what+" since this `time`: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.StringVar(&o.until, "until", "", "only "+what+" before this `time`: a duration ago (1h, 2d) or an RFC 3339 time")
	fl.IntVar(&o.limit, "limit", 50, "show at most this many "+what+" (1-100000)")
	completeFlag(cmd, "action", fixedCompletion(actions...))
	completeFlag(cmd, "workspace", f.completeWorkspaces)
}

// connect checks the log flags, connects (as factory.connect), and completes filter with the
// actor, the time range and the workspace.
func (o *logOptions) connect(cmd *cobra.Command, f *factory, filter *client.AuditFilter) (context.Context, *printer, *client.Client, error) {
	if err := checkLimit(o.limit); err != nil {
		return nil, nil, nil, err
	}
	filter.ActorEmail = optional(o.actor)
	var err error
	if filter.Since, err = parseOptionalSince("--since", o.since, f.now()); err != nil {
		return nil, nil, nil, err
	}
	if filter.Until, err = parseOptionalSince("--until", o.until, f.now()); err != nil {
		return nil, nil, nil, err
	}
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	if filter.WorkspaceID, err = workspaceFlag(ctx, c, o.workspace); err != nil {
		return nil, nil, nil, err
	}
	return ctx, p, c, nil
}

// workspaceFlag resolves a --workspace flag, a name or an id: nil when it
// was not given.
func workspaceFlag(ctx context.Context, c *client.Client, ref string) (*string, error) {
	if ref == "" {
		return nil, nil
	}
	id, err := client.ResolveWorkspaceID(ctx, c, ref)
	if err != nil {
		return nil, err
	}
	return &id, nil
}

func runAudit(cmd *cobra.Command, opts *auditOptions) error {
	var filter client.AuditFilter
	if opts.log.action != "" {
		a, err := parseAction(opts.log.action)
		if err != nil {
			return err
		}
		filter.Action = &a
	}
	ctx, p, c, err := opts.log.connect(cmd, opts.f, &filter)
	if err != nil {
		return err
	}
	if opts.key != "" {
		id := opts.key
		if !client.IsID(id) {
			if opts.log.workspace != "" {
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
	entries, more, chain, err := client.AuditLog(ctx, c, filter, opts.log.limit)
	if err != nil {
		return err
	}
	err = printLog(opts.f, p, entries, more, opts.log.limit, "No audit entries match", "entries", p.auditTable)
	chainNote(opts.f, chain)
	return err
}

// chainNote tells, on stderr whatever the format, that the server cut a
// key's history at a side of its rotation chain, and with which key it
// reads on (docs/design.md#the-audit-commands).
func chainNote(f *factory, chain *client.RotationChainCoverage) {
	if chain == nil {
		return
	}
	if chain.OlderCut {
		fmt.Fprintf(f.io.ErrOut, "btk: the rotation chain goes on before key %s (%d keys covered): older entries are not shown; btk audit --key %s reads on\n", chain.OldestKeyId, chain.Keys, chain.OldestKeyId)
	}
	if chain.NewerCut {
		fmt.Fprintf(f.io.ErrOut, "btk: the rotation chain goes on after key %s (%d keys covered): newer entries are not shown; btk audit --key %s reads on\n", chain.NewestKeyId, chain.Keys, chain.NewestKeyId)
	}
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

// checkLimit checks a --limit: what a log command keeps to print it is
// bounded (client.MaxKeptNodes).
func checkLimit(limit int) error {
	if limit < 1 || limit > client.MaxKeptNodes {
		return usageErrorf("--limit must be 1-%d, as many as btk holds to print them", client.MaxKeptNodes)
	}
	return nil
}

// limitNote tells, on stderr whatever the format, that --limit cut a list.
func limitNote(f *factory, limit int, what string) {
	fmt.Fprintf(f.io.ErrOut, "btk: showing the newest %d %s; more match: raise --limit or narrow with --since/--until\n", limit, what)
}
