package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// btk webhook: the workspace's webhooks (docs/webhooks.md).
func newWebhookCmd(f *factory) *cobra.Command {
	return group(&cobra.Command{
		Use:   "webhook",
		Short: "Manage the webhooks that receive the workspace's events",
		Long: `Webhooks receive the workspace's events (every audit event, such as
api_key.created or api_key.revoked, and api_key.expiring 7 days and 1 day
before a key expires) as signed POST requests (Standard Webhooks). Owner tier.`,
	}, newWebhookAddCmd(f), newWebhookListCmd(f), newWebhookRmCmd(f), newWebhookDeliveriesCmd(f))
}

func newWebhookAddCmd(f *factory) *cobra.Command {
	var events []string
	cmd := &cobra.Command{
		Use:   "add URL",
		Short: "Subscribe a URL to the workspace's events; shows the signing secret once",
		Long: `Subscribe URL to the workspace's events (all of them, or those given with
--event). The signing secret (whsec_…) is shown this once: keep it with the
receiver, which verifies every request with it (docs/webhooks.md). With -o plain
only the secret is printed, for piping into a secrets manager.`,
		Example: `  btk webhook add https://hooks.example.com/btk
  btk webhook add https://hooks.example.com/btk --event api_key.revoked --event api_key.leaked
  btk webhook add https://hooks.example.com/btk -o plain | vault kv put secret/btk-webhook secret=-`,
		Args: exactArgs(1),
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			resp, err := client.CreateWebhook(ctx, c, args[0], events)
			if err != nil {
				return err
			}
			payload := resp.CreateWebhook
			return p.Result(payload, payload.Secret, func() {
				p.Notice("Created webhook %s", payload.Webhook.Id)
				p.Fields(webhookFields(p, payload.Webhook))
				p.Secret("secret", payload.Secret)
			})
		}),
	}
	cmd.Flags().StringArrayVar(&events, "event", nil, "send only this event `type` (repeatable; default every event; an unknown type is refused: the types are in docs/webhooks.md#events)")
	completeFlag(cmd, "event", fixedCompletion(btk.WebhookEventTypes()...))
	return cmd
}

func webhookFields(p *printer, w client.Webhook) []field {
	return []field{{"id", w.Id}, {"url", w.Url}, {"events", webhookEvents(w)}, {"created", p.Time(&w.CreatedAt, "")}}
}

func webhookEvents(w client.Webhook) string {
	if len(w.Events) == 0 {
		return "all"
	}
	return strings.Join(w.Events, ",")
}

func newWebhookListCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the workspace's webhooks",
		Args:  noArgs,
		RunE: listRunE(f, listOf(client.Webhooks, (*client.WebhooksResponse).GetWebhooks),
			"No webhooks; add one with 'btk webhook add URL'", (*printer).webhookTable),
	}
}

func (p *printer) webhookTable(hooks []client.Webhook) {
	rows := make([][]string, len(hooks))
	for i, w := range hooks {
		rows[i] = []string{w.Id, w.Url, webhookEvents(w), p.Time(&w.CreatedAt, "")}
	}
	p.Table([]string{"ID", "URL", "EVENTS", "CREATED"}, rows)
}

func newWebhookRmCmd(f *factory) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm ID",
		Short: "Delete a webhook and its pending deliveries",
		Long:  `Delete a webhook. On a terminal btk asks for confirmation; elsewhere --yes is required.`,
		Args:  exactArgs(1),
		RunE: f.connectedConfirmable(&yes, "delete", func(ctx context.Context, p *printer, c *client.Client, args []string) error {
			if !yes {
				err := f.io.confirm(fmt.Sprintf("Delete webhook %s? Its pending deliveries are dropped.", args[0]), "webhook "+args[0]+" was not deleted")
				if err != nil {
					return err
				}
			}
			if _, err := client.DeleteWebhook(ctx, c, args[0]); err != nil {
				return err
			}
			if p.format == formatJSON {
				return p.JSON(map[string]any{"deleted": true, "id": args[0]})
			}
			p.Notice("Deleted webhook %s", args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func newWebhookDeliveriesCmd(f *factory) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "deliveries ID",
		Short: "Show a webhook's recent deliveries, newest first",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			ctx, p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			ds, more, err := client.DeliveryLog(ctx, c, args[0], limit)
			if err != nil {
				return err
			}
			return printLog(f, p, ds, more, limit, "No deliveries yet", "deliveries", p.deliveryTable)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many deliveries (1-100000)")
	return cmd
}

// btk audit verify.
func newAuditVerifyCmd(f *factory) *cobra.Command {
	var (
		workspace  string
		serverWide bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Recompute the audit chain and name the first row that does not match",
		Long: `Every audit event of a workspace is linked to the one before by a SHA-256
hash chain (docs/webhooks.md). verify asks the server to recompute the chain
and names the first row that does not match: edited, deleted or inserted
outside btk. Exit 0 when the chain is intact, 1 when it is broken.

Keep the printed head (hash and count) somewhere else: a later verify shows
whether the chain still extends it.`,
		Example: `  btk audit verify
  btk audit verify --workspace Acme
  btk audit verify --server-wide -o json`,
		Args: noArgs,
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			ws, err := workspaceFlag(ctx, c, workspace)
			if err != nil {
				return err
			}
			resp, err := client.VerifyAuditChain(ctx, c, ws, serverWide)
			if err != nil {
				return err
			}
			v := resp.VerifyAuditChain
			if p.format == formatJSON {
				if err := p.JSON(v); err != nil {
					return err
				}
			} else {
				state := "intact"
				if !v.Intact {
					state = "BROKEN"
				}
				fields := []field{{"chain", state}, {"rows", strconv.Itoa(v.Count)},
					{"head", v.Head.Hash}, {"head count", strconv.Itoa(v.Head.Count)}, {"head at", p.Time(v.Head.At, "-")}}
				if pr := v.Problem; pr != nil {
					row := "-"
					if pr.EventId != nil {
						row = *pr.EventId
					}
					fields = append(fields, field{"first bad row", row}, field{"position", strconv.Itoa(pr.Position)}, field{"reason", pr.Reason})
				}
				p.Fields(fields)
			}
			if !v.Intact {
				if v.Problem.EventId == nil { // the head disagrees with the rows
					return fmt.Errorf("the audit chain is broken at position %d: %s", v.Problem.Position, v.Problem.Reason)
				}
				return fmt.Errorf("the audit chain is broken at position %d, row %s: %s", v.Problem.Position, *v.Problem.EventId, v.Problem.Reason)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "`workspace` (name or id) to verify; your own by default (platform admins: any)")
	cmd.Flags().BoolVar(&serverWide, "server-wide", false, "verify the chain of the events that belong to no workspace (platform admins)")
	completeFlag(cmd, "workspace", f.completeWorkspaces)
	return cmd
}

// deliveryTable is the table of 'btk webhook deliveries'.
func (p *printer) deliveryTable(ds []client.WebhookDelivery) {
	rows := make([][]string, len(ds))
	for i, d := range ds {
		code := "-"
		if d.LastStatusCode != nil {
			code = strconv.Itoa(*d.LastStatusCode)
		}
		note := ""
		if d.LastError != nil {
			note = *d.LastError
		}
		if d.NextAttemptAt != nil {
			note = strings.TrimSpace(note + " (next " + p.Time(d.NextAttemptAt, "") + ")")
		}
		rows[i] = []string{p.Time(&d.CreatedAt, ""), d.EventType, string(d.Status), strconv.Itoa(d.Attempts), code, d.EventId, note}
	}
	p.Table([]string{"TIME", "EVENT", "STATUS", "ATTEMPTS", "HTTP", "WEBHOOK-ID", "NOTE"}, rows)
}
