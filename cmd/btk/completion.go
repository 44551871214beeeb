package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

// Shell completion of values: fixed sets (plans, roles, actions, output
// formats) and, from the server with the configured session, key names and
// workspace names. A completion never fails loudly: without a session or a
// server it offers nothing.

// completionTimeout bounds a completion's request: a shell waits on it.
const completionTimeout = 3 * time.Second

func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return matching(values, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func matching(values []string, prefix string) []string {
	var out []string
	for _, v := range values {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// positional completes the n-th positional argument with fn, and nothing after.
func positional(fns ...cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(fns) || fns[len(args)] == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fns[len(args)](cmd, args, toComplete)
	}
}

func (f *factory) completionClient(cmd *cobra.Command) (*client.Client, context.Context, context.CancelFunc, bool) {
	c, err := f.client(cmd)
	if err != nil {
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	return c, ctx, cancel, true
}

// completeKeys offers the names of the workspace's keys that are not revoked.
func (f *factory) completeKeys(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, ctx, cancel, ok := f.completionClient(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cancel()
	keys, err := client.AllApiKeys(ctx, c, false)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeWorkspaces offers the names of the caller's workspaces, and every
// workspace's for a platform admin.
func (f *factory) completeWorkspaces(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, ctx, cancel, ok := f.completionClient(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cancel()
	me, err := client.Me(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	seen := map[string]bool{}
	var names []string
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, m := range me.Me.Memberships {
		add(m.WorkspaceName)
	}
	if me.Me.PlatformAdmin {
		if resp, err := client.Workspaces(ctx, c); err == nil {
			for _, w := range resp.Workspaces {
				add(w.Name)
			}
		}
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

var (
	completePlans = fixedCompletion(enumNames(client.AllPlan)...)
	completeRoles = fixedCompletion(append(enumNames(client.AllRole), "none")...)
)

// completeFlag registers fn as the completion of cmd's flag name. Cobra
// refuses only a flag that does not exist or is completed already: a bug,
// which panics in every test that builds the commands.
func completeFlag(cmd *cobra.Command, name string, fn cobra.CompletionFunc) {
	if err := cmd.RegisterFlagCompletionFunc(name, fn); err != nil {
		panic(err)
	}
}
