package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// run executes the btk command line and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	v := viper.New()
	root := &cobra.Command{
		Use:           "btk",
		Short:         "Workspace API keys: the btk server and its client",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(v))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "btk: %v\n", err)
		return 1
	}
	return 0
}
