package main

import (
	"runtime"
	"runtime/debug"

	"github.com/btk-project/btk/internal/server"
	"github.com/spf13/cobra"
)

// Set at build time by .goreleaser.yaml:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123 -X main.date=2026-01-02T03:04:05Z"
var version, commit, date string

// versionInfo is what `btk version` says.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	// Modified is set when the binary was built from a checkout with
	// uncommitted changes (known from the build info only).
	Modified bool `json:"modified,omitempty"`
}

// readVersion takes each figure from ldflags, else from the build info the
// Go toolchain embeds: the module version for `go install …@v1.2.3`, the
// VCS revision and commit time for a build in a git checkout. What neither
// knows is "dev" for the version and "unknown" for the commit and date.
func readVersion() versionInfo { return versionFrom(debug.ReadBuildInfo()) }

func versionFrom(info *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if ok {
		if v.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				v.Modified = s.Value == "true" && commit == ""
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Date == "" {
		v.Date = "unknown"
	}
	return v
}

// buildVersion is the version alone (btk --version, the root command).
func buildVersion() string { return readVersion().Version }

// buildInfo is what the metrics report as btk_build_info.
func buildInfo() server.BuildInfo {
	v := readVersion()
	return server.BuildInfo{Version: v.Version, Commit: v.Commit}
}

func newVersionCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of btk",
		Long: `Print what this btk binary is: its version, the commit and date it was built
from, and the Go version that built it. -o plain prints the version alone.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.printer(cmd)
			if err != nil {
				return err
			}
			v := readVersion()
			switch p.format {
			case formatJSON:
				return p.JSON(v)
			case formatPlain:
				_, err := f.io.Out.Write([]byte(v.Version + "\n"))
				return err
			}
			commit := v.Commit
			if v.Modified {
				commit += " (modified)"
			}
			p.Fields([]field{{"Version", v.Version}, {"Commit", commit}, {"Built", v.Date}, {"Go", v.GoVersion}})
			return nil
		},
	}
}
