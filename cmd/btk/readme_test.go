package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// The README's settings table is what operators read instead of --help:
// every flag of btk serve, and its environment variable, must be in it.
func TestREADMEListsEveryServeSetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "### Settings of `btk serve`")
	if start < 0 {
		t.Fatal("README has no \"Settings of `btk serve`\" section")
	}
	table := text[start:]
	if end := strings.Index(table[1:], "\n### "); end > 0 {
		table = table[:end+1]
	}
	newServeCmd(viper.New()).Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		env := "BTK_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		row := "| `--" + f.Name + "` | `" + env + "` |"
		if !strings.Contains(table, row) {
			t.Errorf("README's settings table has no row starting %q", row)
		}
	})
}
