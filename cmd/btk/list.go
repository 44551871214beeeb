package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newListCmd(f *factory) *cobra.Command {
	var all bool
	const none = "No API keys; create one with 'btk create NAME'"
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the workspace's API keys",
		Aliases: []string{"ls"},
		Args:    noArgs,
		RunE: f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
			if !p.human() {
				return streamKeys(ctx, p, c, all)
			}
			keys, err := client.AllApiKeys(ctx, c, all)
			if ce := (*client.Error)(nil); errors.As(err, &ce) && ce.Code == client.CodeTooLarge {
				ce.Message += ": a table needs every row first; -o json and -o plain print the keys a page at a time"
			}
			if err != nil {
				return err
			}
			return printList(p, keys, none, p.apiKeyTable)
		}),
	}
	cmd.Long = `List the workspace's API keys, newest first: every key not revoked (active
and expired), or with --all the revoked ones too. The plaintext of a key is
never shown again; KEY is its display prefix and the last 4 characters.

A table holds at most 100,000 keys; -o json and -o plain print the keys a
page at a time, as they arrive, holding none (docs/design.md#long-lists).`
	cmd.Example = `  btk list
  btk list --all -o json | jq -r '.[] | select(.status == "EXPIRED") | .name'
  btk list -o plain | cut -f1`
	cmd.Flags().BoolVar(&all, "all", false, "include revoked keys")
	return cmd
}

// streamKeys prints the keys for scripts (-o json, -o plain) a page at a
// time, keeping none: revoked keys stay as the record, so --all lists as
// many as a workspace ever revoked. The output of a list cut short by an
// error ends where the error came (JSON without its closing bracket).
func streamKeys(ctx context.Context, p *printer, c *client.Client, all bool) error {
	var arr *jsonArray
	if p.format == formatJSON {
		arr = p.jsonArray()
	}
	err := client.EachApiKey(ctx, c, all, func(keys []client.ApiKey) error {
		if arr == nil {
			p.apiKeyTable(keys)
			return nil
		}
		for _, k := range keys {
			if err := arr.add(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || arr == nil {
		return err
	}
	return arr.close()
}
