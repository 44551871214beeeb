package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version string

// buildVersion is the ldflags version, else the module version the binary
// was built from (go install ...@v1.2.3), else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

func newVersionCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of btk",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.printer(cmd)
			if err != nil {
				return err
			}
			switch p.format {
			case formatJSON:
				return p.JSON(map[string]string{"version": f.version})
			case formatPlain:
				fmt.Fprintln(f.io.Out, f.version)
			default:
				fmt.Fprintf(f.io.Out, "btk %s\n", f.version)
			}
			return nil
		},
	}
}
