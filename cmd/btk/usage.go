package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

type usageOptions struct {
	f     *factory
	since string
	until string
	by    string
}

func newUsageCmd(f *factory) *cobra.Command {
	opts := &usageOptions{f: f}
	cmd := &cobra.Command{
		Use:   "usage [KEY]",
		Short: "Show how much a key (or the workspace) was used, per day or hour",
		Long: `Show the uses of KEY (a key id, or the name of a key that is not revoked), or
of the whole workspace without KEY, per UTC day or hour: requests accepted,
refused for the rate limit, and refused because the key is revoked, expired,
restricted or a canary (someone still using a dead key shows there).

On a terminal each period gets a bar (█ accepted, ▒ rate-limited, ░ refused);
in a pipe, or with -o plain, one line per period: start, accepted,
rate-limited, refused, tab-separated. -o json prints the array of points.
Counts are written about every 30 seconds, so the latest lag a little. Owner
tier or ADMIN. At most 90 days by hour, 366 days by day.`,
		Example: `  btk usage payments-backend              # the last 7 days
  btk usage payments-backend --since 24h --by hour
  btk usage --since 30d                      # the whole workspace, and its top keys
  btk usage old-key -o json | jq 'map(.refused) | add'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return exactArgs(1)(cmd, args)
			}
			return nil
		},
		ValidArgsFunction: positional(f.completeKeys),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUsage(cmd, opts, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.since, "since", "7d", "from this `time`: a duration ago (24h, 7d) or an RFC 3339 time")
	fl.StringVar(&opts.until, "until", "", "up to this `time` (default now): a duration ago or an RFC 3339 time")
	fl.StringVar(&opts.by, "by", "day", "one point per `period`: day or hour")
	completeFlag(cmd, "by", fixedCompletion("day", "hour"))
	return cmd
}

func runUsage(cmd *cobra.Command, opts *usageOptions, args []string) error {
	f := opts.f
	g, err := enumValue("--by", opts.by, client.AllUsageGranularity)
	if err != nil {
		return err
	}
	since, err := parseSince("--since", opts.since, f.now())
	if err != nil {
		return err
	}
	until, err := parseOptionalSince("--until", opts.until, f.now())
	if err != nil {
		return err
	}
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		k, err := client.ResolveKey(ctx, c, args[0])
		if err != nil {
			return err
		}
		resp, err := client.KeyUsage(ctx, c, k.Id, &since, until, &g)
		if err != nil {
			return err
		}
		if resp.ApiKey == nil {
			return &client.Error{Code: btk.CodeNotFound, Message: "no such key"}
		}
		u := resp.ApiKey
		if p.format == formatJSON {
			return p.JSON(u.Usage)
		}
		p.usagePoints(u.Usage, g)
		if p.human() && p.io.outTTY && u.LastUsedIp != nil {
			fmt.Fprintf(p.io.Out, "\nLast accepted use %s from %s (%s)\n", p.Time(u.LastUsedAt, "never"), *u.LastUsedIp, deref(u.LastUsedUserAgent, "no user agent"))
		}
		return nil
	}
	resp, err := client.WorkspaceUsage(ctx, c, &since, until, &g)
	if err != nil {
		return err
	}
	u := resp.WorkspaceUsage
	if p.format == formatJSON {
		return p.JSON(u.Points)
	}
	p.usagePoints(u.Points, g)
	if p.human() && p.io.outTTY && len(u.TopKeys) > 0 {
		fmt.Fprintln(p.io.Out)
		rows := make([][]string, len(u.TopKeys))
		for i, t := range u.TopKeys {
			rows[i] = []string{t.ApiKey.Name, strconv.Itoa(t.Accepted), strconv.Itoa(t.RateLimited), strconv.Itoa(t.Refused)}
		}
		p.Table([]string{"TOP KEYS", "ACCEPTED", "RATE-LIMITED", "REFUSED"}, rows)
	}
	return nil
}

// usagePoints prints one line per period: a bar on a terminal, plain
// tab-separated numbers otherwise (a pipe, -o plain).
func (p *printer) usagePoints(pts []client.UsagePoint, g client.UsageGranularity) {
	layout := "2006-01-02"
	if g == client.UsageGranularityHour {
		layout = "2006-01-02 15:00"
	}
	if !p.human() || !p.io.outTTY {
		for _, pt := range pts {
			fmt.Fprintf(p.io.Out, "%s\t%d\t%d\t%d\n", pt.Start.UTC().Format(time.RFC3339), pt.Accepted, pt.RateLimited, pt.Refused)
		}
		return
	}
	most := 0
	for _, pt := range pts {
		most = max(most, pt.Accepted+pt.RateLimited+pt.Refused)
	}
	width := 40
	if w := p.io.outWidth(); w > 0 {
		// date, two blanks, bar, blank, the numbers (about 30 columns)
		width = max(10, min(60, w-len(layout)-34))
	}
	acc := p.r.NewStyle().Foreground(lipgloss.Color("2"))
	lim := p.r.NewStyle().Foreground(lipgloss.Color("3"))
	ref := p.r.NewStyle().Foreground(lipgloss.Color("1"))
	for _, pt := range pts {
		a, l, r := barCells(pt.Accepted, most, width), barCells(pt.RateLimited, most, width), barCells(pt.Refused, most, width)
		bar := acc.Render(strings.Repeat("█", a)) + lim.Render(strings.Repeat("▒", l)) + ref.Render(strings.Repeat("░", r))
		nums := strconv.Itoa(pt.Accepted)
		if pt.RateLimited > 0 || pt.Refused > 0 {
			nums += fmt.Sprintf(" (%d rate-limited, %d refused)", pt.RateLimited, pt.Refused)
		}
		fmt.Fprintf(p.io.Out, "%s  %s%s %s\n", pt.Start.UTC().Format(layout), bar, strings.Repeat(" ", max(0, width-a-l-r)), nums)
	}
}

// barCells is how many of width cells n takes when most fills them all; any
// use at all takes at least one.
func barCells(n, most, width int) int {
	if n <= 0 || most <= 0 {
		return 0
	}
	return max(1, n*width/most)
}
