package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type auditOptions struct {
	f         *factory
	workspace string
	key       string
	action    string
	since     string
	limit     int
}

func newAuditCmd(f *factory) *cobra.Command {
	opts := &auditOptions{f: f}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the API key audit log, newest first",
		Long: `Show who created, rotated and revoked keys, when, and from where: the
key-specific audit log, newest first. Owners see their workspace; a platform
admin may read any workspace with --workspace (an id or a name).

--key takes a key id, or the name of an active key; use the id for a key
that was revoked.`,
		Example: `  btk audit --since 24h
  btk audit --key payments-backend --action rotated
  btk audit --workspace Acme --since 2026-11-01T00:00:00Z --limit 500 -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAudit(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.workspace, "workspace", "", "`workspace` (id or name) to read; platform admin")
	fl.StringVar(&opts.key, "key", "", "only entries about this `KEY` (id or name of an active key)")
	fl.StringVar(&opts.action, "action", "", "only this `action`: created, rotated, revoked or revoked_all")
	fl.StringVar(&opts.since, "since", "", "only entries since this `time`: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.IntVar(&opts.limit, "limit", 50, "show at most this many entries")
	return cmd
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
	if opts.since != "" {
		t, err := parseSince(opts.since, f.now())
		if err != nil {
			return err
		}
		filter.Since = &t
	}
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
			k, err := client.ResolveKey(ctx, c, id)
			if err != nil {
				return err
			}
			id = k.Id
		}
		filter.ApiKeyID = &id
	}
	entries, err := client.AuditLog(ctx, c, filter, opts.limit)
	if err != nil {
		return err
	}
	switch {
	case p.format == formatJSON:
		return p.JSON(entries)
	case len(entries) == 0:
		p.Notice("No audit entries match")
	default:
		p.auditTable(entries)
	}
	return nil
}
