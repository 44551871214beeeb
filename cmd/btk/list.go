package main

import (
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

type listOptions struct {
	f   *factory
	all bool
}

func newListCmd(f *factory) *cobra.Command {
	opts := &listOptions{f: f}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the workspace's API keys",
		Long: `List the workspace's API keys, newest first: every key not revoked (active
and expired), or with --all the revoked ones too. The plaintext of a key is
never shown again; KEY is its display prefix and the last 4 characters.`,
		Example: `  btk list
  btk list --all -o json | jq -r '.[] | select(.status == "EXPIRED") | .name'
  btk list -o plain | cut -f1`,
		Aliases: []string{"ls"},
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runList(cmd, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.all, "all", false, "include revoked keys")
	return cmd
}

func runList(cmd *cobra.Command, opts *listOptions) error {
	p, err := opts.f.printer(cmd)
	if err != nil {
		return err
	}
	c, err := opts.f.client(cmd)
	if err != nil {
		return err
	}
	keys, err := client.AllApiKeys(cmd.Context(), c, opts.all)
	if err != nil {
		return err
	}
	switch {
	case p.format == formatJSON:
		return p.JSON(keys)
	case len(keys) == 0:
		p.Notice("No API keys; create one with 'btk create NAME'")
	default:
		p.apiKeyTable(keys)
	}
	return nil
}
