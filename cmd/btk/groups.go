package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// groupRunE makes a command that only groups subcommands fail as a usage
// error (exit 2) when called alone or with an unknown subcommand, rather
// than print its help and exit 0 as if something had been done.
func groupRunE(cmd *cobra.Command, args []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q (commands: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))
	}
	return usageErrorf("%q needs a command: %s", cmd.CommandPath(), strings.Join(names, ", "))
}

// group makes cmd a command that only groups the subcommands subs.
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = groupRunE
	return cmd
}
