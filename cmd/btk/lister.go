package main

import (
	"context"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

// printList writes a list: items as JSON with -o json; else the notice none
// (for people) when there are none, or table.
func printList[T any](p *printer, items []T, none string, table func([]T)) error {
	switch {
	case p.format == formatJSON:
		return p.JSON(items)
	case len(items) == 0:
		p.Notice("%s", none)
	default:
		table(items)
	}
	return nil
}

// listCommand is a command `list` (alias ls) that takes no argument: it
// fetches the items and prints them (listRunE).
func listCommand[T any](f *factory, short string, fetch func(context.Context, *client.Client) ([]T, error), none string, table func(*printer, []T)) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   short,
		Aliases: []string{"ls"},
		Args:    noArgs,
		RunE:    listRunE(f, fetch, none, table),
	}
}

// listOf is the fetch of a list query: query, then list, the getter of the
// list its response holds, such as (*client.AccountsResponse).GetAccounts.
func listOf[R, T any](query func(context.Context, graphql.Client) (*R, error), list func(*R) []T) func(context.Context, *client.Client) ([]T, error) {
	return func(ctx context.Context, c *client.Client) ([]T, error) {
		resp, err := query(ctx, c)
		if err != nil {
			return nil, err
		}
		return list(resp), nil
	}
}

// listRunE is the RunE of a list command that takes no argument: it fetches
// the items and prints them with printList.
func listRunE[T any](f *factory, fetch func(context.Context, *client.Client) ([]T, error), none string, table func(*printer, []T)) func(*cobra.Command, []string) error {
	return f.connected(func(ctx context.Context, p *printer, c *client.Client, _ []string) error {
		items, err := fetch(ctx, c)
		if err != nil {
			return err
		}
		return printList(p, items, none, func(items []T) { table(p, items) })
	})
}
