package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

type eventsOptions struct {
	f          *factory
	workspace  string
	serverWide bool
	action     string
	actor      string
	since      string
	until      string
	limit      int
}

// eventActions are the audit_events actions, for --action and its completion.
var eventActions = []string{
	"api_key.created", "api_key.rotated", "api_key.revoked", "api_key.revoked_all",
	btk.EventSessionLogin, btk.EventSessionElevated, btk.EventSessionImpersonated,
	btk.EventMembershipChanged, btk.EventWorkspacePlanChanged, btk.EventWorkspaceLimitsChanged,
	btk.EventAccountCreated,
}

func newEventsCmd(f *factory) *cobra.Command {
	opts := &eventsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the workspace's audit events, newest first",
		Long: `Show the workspace audit log (audit_events), newest first: key changes, and
logins, elevations, impersonations, membership, plan and limit changes, each
attributed to the account that acted and to the impersonating platform admin,
if any. Owners see their workspace; a platform admin may read any workspace
with --workspace, and with --server-wide the events that belong to no
workspace (accounts created, logins of sessions without a workspace).`,
		Example: `  btk events --since 24h
  btk events --action session.login --actor ops@example.com
  btk events --workspace Acme --action membership.changed -o json
  btk events --server-wide --action account.created`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEvents(cmd, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.workspace, "workspace", "", "`workspace` (name or id) to read; your own by default")
	fl.BoolVar(&opts.serverWide, "server-wide", false, "the events that belong to no workspace (platform admin)")
	fl.StringVar(&opts.action, "action", "", "only this `action`, such as session.login or membership.changed")
	fl.StringVar(&opts.actor, "actor", "", "only events by the account with this `email`")
	fl.StringVar(&opts.since, "since", "", "only events since this `time`: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.StringVar(&opts.until, "until", "", "only events before this `time`: a duration ago or an RFC 3339 time")
	fl.IntVar(&opts.limit, "limit", 50, "show at most this many events")
	cmd.RegisterFlagCompletionFunc("action", fixedCompletion(eventActions...))
	cmd.RegisterFlagCompletionFunc("workspace", f.completeWorkspaces)
	return cmd
}

func runEvents(cmd *cobra.Command, opts *eventsOptions) error {
	f := opts.f
	if opts.limit < 1 {
		return usageErrorf("--limit must be at least 1")
	}
	if err := exclusive(cmd, "workspace", "server-wide"); err != nil {
		return err
	}
	filter := client.AuditFilter{ServerWide: opts.serverWide, EventAction: optional(opts.action), ActorEmail: optional(opts.actor)}
	if err := timeRange(f, opts.since, opts.until, &filter); err != nil {
		return err
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
	events, more, err := client.EventLog(ctx, c, filter, opts.limit)
	if err != nil {
		return err
	}
	return printLog(f, p, events, more, opts.limit, "No events match", "events", p.eventTable)
}
