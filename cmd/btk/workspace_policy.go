package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/btk-project/btk/internal/client"
)

func newWorkspacePolicyCmd(f *factory) *cobra.Command {
	var maxLifetime, revokeUnused, workspace string
	var off bool
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show or set the workspace's key policy (maximum lifetime, unused keys)",
		Long: `Show or set the key policy of your workspace (or --workspace, for a platform
admin). --max-lifetime: keys must be issued with an expiry within it (create,
rotate), and a key older than it is refused as expired. --revoke-unused-after:
the server revokes keys not used for that long (by last use, else creation),
once, audited as actor "system". Both take whole days (90d; 1d to 3650d).
Every call sets both: a setting left out is turned off. --off turns both off.
Without flags it shows the policy. Owner or platform admin. See docs/access.md.`,
		Example: `  btk workspace policy
  btk workspace policy --max-lifetime 90d --revoke-unused-after 30d
  btk workspace policy --off`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := exclusive(cmd, "off", "max-lifetime"); err != nil {
				return err
			}
			if err := exclusive(cmd, "off", "revoke-unused-after"); err != nil {
				return err
			}
			maxDays, err := policyDays(cmd, "max-lifetime", maxLifetime)
			if err != nil {
				return err
			}
			unusedDays, err := policyDays(cmd, "revoke-unused-after", revokeUnused)
			if err != nil {
				return err
			}
			ctx, p, c, err := f.connect(cmd)
			if err != nil {
				return err
			}
			ws, err := readWorkspace(ctx, c, workspace)
			if err != nil {
				return err
			}
			if maxDays == nil && unusedDays == nil && !off {
				return p.Object(ws, p.tenantFields(ws))
			}
			resp, err := client.SetWorkspaceKeyPolicy(ctx, c, ws.Id, maxDays, unusedDays)
			if err != nil {
				return err
			}
			return p.Object(resp.SetWorkspaceKeyPolicy, p.tenantFields(resp.SetWorkspaceKeyPolicy))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&maxLifetime, "max-lifetime", "", "the longest a key may live, in whole days such as 90d")
	fl.StringVar(&revokeUnused, "revoke-unused-after", "", "revoke keys unused for this long, in whole days such as 30d")
	fl.BoolVar(&off, "off", false, "turn the policy off")
	fl.StringVar(&workspace, "workspace", "", "`workspace` (name or id) to configure; your own by default")
	completeFlag(cmd, "workspace", f.completeWorkspaces)
	return cmd
}

// policyDays reads a policy duration in whole days; nil when the flag was
// not given. Given empty (a script's unset variable) it is an error, not
// "left out": leaving a setting out turns it off.
func policyDays(cmd *cobra.Command, flag, s string) (*int, error) {
	if !cmd.Flags().Changed(flag) {
		return nil, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 || d%(24*time.Hour) != 0 {
		return nil, usageErrorf("--%s: want a whole number of days such as 90d, got %q (leave it out, or give --off, to turn it off)", flag, s)
	}
	n := int(d / (24 * time.Hour))
	return &n, nil
}
