package main

import (
	"context"
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
	chain bool
}

func newUsageCmd(f *factory) *cobra.Command {
	opts := &usageOptions{f: f}
	cmd := &cobra.Command{
		Use:   "usage [KEY]",
		Short: "Show how much a key (or the workspace) was used, per day or hour",
		Long: `Show the uses of KEY, or of the whole workspace without KEY, per UTC day or
hour: requests accepted, refused for the rate limit, and refused because the
key is revoked, expired, restricted or a canary (someone still using a dead
key shows there). KEY is a key id, or a name: the key of that name that is
not revoked, else the newest revoked one.

A use is counted on the key presented. After 'btk rotate' the name belongs to
the new key, and an old key still being tried shows as refused on the old
key: --rotation-chain shows every key of KEY's rotation chain (the keys it
replaced and those that replaced it, as 'btk audit --key' follows them), the
points summed and each key's own totals, with its id, hint and status.

On a terminal each period gets a bar (█ accepted, ▒ rate-limited, ░ refused),
then the chain's keys or the workspace's top keys; in a pipe, or with -o
plain, one line per period: start, accepted, rate-limited, refused,
tab-separated. -o json prints the array of points, for KEY or the
workspace (the top keys are on a terminal, or in GraphQL's
workspaceUsage{topKeys}); with --rotation-chain, {"points": [...], "keys":
[...]}, newest key first. Counts are written about every 30 seconds, so the
latest lag a little. Owner tier or ADMIN.

A duration counts whole periods back, the current one included: --since 7d
is the last 7 UTC days, today among them; --since 24h --by hour the last 24
hours. At most 90 days by hour (--since 90d), 366 days by day (--since 366d).`,
		Example: `  btk usage payments-backend              # the last 7 days
  btk usage payments-backend --since 24h --by hour
  btk usage payments-backend --rotation-chain   # and the keys it replaced: is an old one still tried?
  btk usage payments-backend --rotation-chain -o json | jq '.keys[] | select(.refused > 0) | {id: .apiKey.id, refused}'
  btk usage --since 30d                      # the whole workspace, and its top keys
  btk usage KEY_ID -o json | jq 'map(.refused) | add'`,
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
	fl.StringVar(&opts.since, "since", "7d", "from this `time`: a duration (24h, 7d: that many hours or days, the current one included) or an RFC 3339 time")
	fl.StringVar(&opts.until, "until", "", "up to this `time` (default: now, the current period included): a duration ago or an RFC 3339 time")
	fl.StringVar(&opts.by, "by", "day", "one point per `period`: day or hour")
	fl.BoolVar(&opts.chain, "rotation-chain", false, "every key of KEY's rotation chain: the points summed, and each key's totals")
	completeFlag(cmd, "by", fixedCompletion("day", "hour"))
	return cmd
}

func runUsage(cmd *cobra.Command, opts *usageOptions, args []string) error {
	f := opts.f
	g, err := enumValue("--by", opts.by, client.AllUsageGranularity)
	if err != nil {
		return err
	}
	if opts.chain && len(args) == 0 {
		return usageErrorf("--rotation-chain needs a KEY")
	}
	since, until, err := usageRange(opts.since, opts.until, g, f.now())
	if err != nil {
		return err
	}
	ctx, p, c, err := f.connect(cmd)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		// A revoked key's name too: usage is where a dead key still being
		// tried shows (docs/usage.md#reading-it).
		k, err := client.ResolveKeyForAudit(ctx, c, args[0])
		if err != nil {
			return err
		}
		resp, err := client.KeyUsage(ctx, c, k.Id, &since, &until, &g)
		if err != nil {
			return err
		}
		if resp.ApiKey == nil {
			return &client.Error{Code: btk.CodeNotFound, Message: "no such key"}
		}
		u := *resp.ApiKey
		if opts.chain {
			return chainUsage(ctx, p, c, u, since, until, g)
		}
		if p.format == formatJSON {
			return p.JSON(u.Usage)
		}
		p.usagePoints(u.Usage, g)
		p.lastUse(u)
		if u.RotatedFromId != nil || u.ReplacedById != nil {
			p.Notice("Counted: this key only (%s_…%s). The other keys of its rotation chain count their own uses (an old key still tried shows as refused there): add --rotation-chain to see them all.", u.DisplayPrefix, u.Hint)
		}
		return nil
	}
	resp, err := client.WorkspaceUsage(ctx, c, &since, &until, &g)
	if err != nil {
		return err
	}
	u := resp.WorkspaceUsage
	if p.format == formatJSON {
		// The array of points, as for a key (docs/design.md#cli): the top
		// keys are the terminal's, or GraphQL's workspaceUsage{topKeys}.
		return p.JSON(u.Points)
	}
	p.usagePoints(u.Points, g)
	if p.human() && p.io.outTTY && len(u.TopKeys) > 0 {
		fmt.Fprintln(p.io.Out)
		rows := make([][]string, len(u.TopKeys))
		for i, t := range u.TopKeys {
			k := t.ApiKey
			rows[i] = []string{k.Name, k.DisplayPrefix + "_…" + k.Hint, p.Status(string(k.Status)),
				strconv.Itoa(t.Accepted), strconv.Itoa(t.RateLimited), strconv.Itoa(t.Refused)}
		}
		p.Table([]string{"TOP KEYS", "KEY", "STATUS", "ACCEPTED", "RATE-LIMITED", "REFUSED"}, rows)
	}
	return nil
}

// chainKeyTotal is one key of a rotation chain with its totals over the
// range, in the shape of workspaceUsage.topKeys (KeyUsageTotal).
type chainKeyTotal struct {
	ApiKey      chainKey `json:"apiKey"`
	Accepted    int      `json:"accepted"`
	RateLimited int      `json:"rateLimited"`
	Refused     int      `json:"refused"`
}

// chainKey is what tells a key of a chain apart: the name is shared.
type chainKey struct {
	Id                string              `json:"id"`
	Name              string              `json:"name"`
	DisplayPrefix     string              `json:"displayPrefix"`
	Hint              string              `json:"hint"`
	Status            client.ApiKeyStatus `json:"status"`
	CreatedAt         time.Time           `json:"createdAt"`
	RevokedAt         *time.Time          `json:"revokedAt"`
	RotatedFromId     *string             `json:"rotatedFromId"`
	ReplacedById      *string             `json:"replacedById"`
	LastUsedAt        *time.Time          `json:"lastUsedAt"`
	LastUsedIp        *string             `json:"lastUsedIp"`
	LastUsedUserAgent *string             `json:"lastUsedUserAgent"`
}

// chainUsage prints the usage of every key of u's rotation chain: the
// points summed, and each key's totals, newest key first
// (docs/usage.md#reading-it).
func chainUsage(ctx context.Context, p *printer, c *client.Client, u client.KeyUsageSeries, since, until time.Time, g client.UsageGranularity) error {
	chain, cut, err := client.RotationChainUsage(ctx, c, u, &since, &until, &g)
	if err != nil {
		return err
	}
	if cut { // whatever the format, as a --limit that cut a list
		fmt.Fprintf(p.io.ErrOut, "btk: the rotation chain has more than %d keys: showing the %d nearest to %s\n", client.MaxChainKeys, len(chain), u.Id)
	}
	series := make([][]client.UsagePoint, len(chain))
	keys := make([]chainKeyTotal, len(chain))
	for i, k := range chain {
		series[i] = k.Usage
		keys[i].ApiKey = chainKey{k.Id, k.Name, k.DisplayPrefix, k.Hint, k.Status, k.CreatedAt, k.RevokedAt,
			k.RotatedFromId, k.ReplacedById, k.LastUsedAt, k.LastUsedIp, k.LastUsedUserAgent}
		for _, pt := range k.Usage {
			keys[i].Accepted += pt.Accepted
			keys[i].RateLimited += pt.RateLimited
			keys[i].Refused += pt.Refused
		}
	}
	points := client.SumUsage(series...)
	if p.format == formatJSON {
		return p.JSON(struct {
			Points []client.UsagePoint `json:"points"`
			Keys   []chainKeyTotal     `json:"keys"`
		}{points, keys})
	}
	p.usagePoints(points, g)
	if p.human() && p.io.outTTY {
		fmt.Fprintln(p.io.Out)
		rows := make([][]string, len(keys))
		for i, t := range keys {
			k := t.ApiKey
			rows[i] = []string{k.Name, k.DisplayPrefix + "_…" + k.Hint, k.Id, p.Status(string(k.Status)), p.Time(k.RevokedAt, "-"),
				strconv.Itoa(t.Accepted), strconv.Itoa(t.RateLimited), strconv.Itoa(t.Refused)}
		}
		p.Table([]string{"ROTATION CHAIN", "KEY", "ID", "STATUS", "REVOKED", "ACCEPTED", "RATE-LIMITED", "REFUSED"}, rows)
	}
	p.lastUse(u)
	return nil
}

// lastUse tells, on a terminal, where the key's latest accepted request
// came from.
func (p *printer) lastUse(u client.KeyUsageSeries) {
	if p.human() && p.io.outTTY && u.LastUsedIp != nil {
		fmt.Fprintf(p.io.Out, "\nLast accepted use of %s %s from %s (%s)\n", u.DisplayPrefix+"_…"+u.Hint, p.Time(u.LastUsedAt, "never"), *u.LastUsedIp, deref(u.LastUsedUserAgent, "no user agent"))
	}
}

// usageRange is the range of --since and --until in whole periods of g. A
// duration counts back from the end of the period that holds now, that
// period included: --since 7d is 7 days, today the last of them, and the
// documented maximum (90d by hour, 366d by day) is exactly the server's. A
// since inside a period would be widened by the server to the period's
// start, one point more than asked (docs/usage.md#reading-it). Without
// --until the range ends with the period that holds now, sent explicitly so
// that a clock a second apart from the server's adds no period either.
// RFC 3339 times are sent as given.
func usageRange(sinceFlag, untilFlag string, g client.UsageGranularity, now time.Time) (since, until time.Time, err error) {
	period := 24 * time.Hour
	if g == client.UsageGranularityHour {
		period = time.Hour
	}
	end := now.UTC().Truncate(period).Add(period)
	if since, err = parseSince("--since", sinceFlag, end); err != nil {
		return since, until, err
	}
	if _, notTime := time.Parse(time.RFC3339, sinceFlag); notTime != nil { // a duration
		since = since.Truncate(period)
	}
	until = end
	if untilFlag != "" {
		until, err = parseSince("--until", untilFlag, now)
	}
	return since, until, err
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
