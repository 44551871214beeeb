package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

type eventsOptions struct {
	f          *factory
	log        logOptions
	serverWide bool
}

// eventActions are the audit_events actions, for --action and its completion.
var eventActions = btk.EventActions()

func newEventsCmd(f *factory) *cobra.Command {
	opts := &eventsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the workspace's audit events, newest first",
		Long: `Show the workspace audit log (audit_events), newest first: key changes, and
logins, elevations, impersonations, the workspace's creation, membership,
plan, limit and policy changes, webhooks added and removed, each attributed
to the account that acted and to the impersonating platform admin, if any.
Owners see their workspace; a platform admin may read any workspace with
--workspace, and with --server-wide the events that belong to no workspace
(account changes, logins of sessions without a workspace).`,
		Example: `  btk events --since 24h
  btk events --action session.login --actor ops@example.com
  btk events --workspace Acme --action membership.changed -o json
  btk events --server-wide --action account.created`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEvents(cmd, opts)
		},
	}
	opts.log.addFlags(f, cmd, "events", "only this `action`, such as session.login or membership.changed", eventActions)
	cmd.Flags().BoolVar(&opts.serverWide, "server-wide", false, "the events that belong to no workspace (platform admin)")
	return cmd
}

func runEvents(cmd *cobra.Command, opts *eventsOptions) error {
	if err := exclusive(cmd, "workspace", "server-wide"); err != nil {
		return err
	}
	filter := client.AuditFilter{ServerWide: opts.serverWide, EventAction: optional(opts.log.action)}
	ctx, p, c, err := opts.log.connect(cmd, opts.f, &filter)
	if err != nil {
		return err
	}
	events, more, err := client.EventLog(ctx, c, filter, opts.log.limit)
	if err != nil {
		return err
	}
	return printLog(opts.f, p, events, more, opts.log.limit, "No events match", "events", p.eventTable)
}
