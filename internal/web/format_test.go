package web

import (
	"testing"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

func TestFormat(t *testing.T) {
	for n, want := range map[int]string{0: "0", 600: "600", 1000: "1,000", 100000: "100,000", 100000000: "100,000,000", -1500: "-1,500"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	for p, want := range map[btk.Plan]string{btk.PlanCloudStarter: "Cloud Starter", btk.PlanCloudEnterprise: "Cloud Enterprise", btk.PlanSelfHosted: "Self-hosted"} {
		if got := planName(p); got != want {
			t.Errorf("planName(%s) = %q, want %q", p, got, want)
		}
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		-10 * time.Second: "just now", -time.Minute: "1 minute ago", -3 * time.Hour: "3 hours ago",
		-72 * time.Hour: "3 days ago", -90 * 24 * time.Hour: "Aug 25, 2026", 2 * time.Hour: "in 2 hours",
	} {
		if got := ago(now.Add(d), now); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
	if got := short("5dc0f961-1111-4222-8333-444455556666"); got != "5dc0f961" {
		t.Errorf("short = %q", got)
	}
	row := newAuditRow(&btk.AuditEvent{
		Action: "api_key.rotated", ActorEmail: "o@example.com", ImpersonatorID: "x", TargetType: "api_key",
		TargetID: "5dc0f961-1111-4222-8333-444455556666", Metadata: `{"name":"ci","newApiKeyId":"aaaaaaaa-1111-4222-8333-444455556666","newName":"ci-2"}`,
	}, now)
	if row.Action != "Rotated key" || row.Target != "ci" || row.Detail != "replaced by aaaaaaaa (“ci-2”)" || !row.Impersonated {
		t.Errorf("rotated row: %+v", row)
	}
	all := newAuditRow(&btk.AuditEvent{Action: "api_key.revoked_all", TargetType: "workspace", Metadata: `{"revokedCount":3}`}, now)
	if all.Target != "Workspace" || all.Detail != "3 keys revoked" {
		t.Errorf("revoked_all row: %+v", all)
	}
	member := newAuditRow(&btk.AuditEvent{Action: btk.EventMembershipChanged, TargetType: "account", Metadata: `{"email":"m@example.com","role":"ADMIN","previousRole":"MEMBER","ip":"10.0.0.1"}`}, now)
	if member.Target != "m@example.com" || member.Detail != "MEMBER → ADMIN" || member.From != "10.0.0.1" {
		t.Errorf("membership row: %+v", member)
	}
	plan := newAuditRow(&btk.AuditEvent{Action: btk.EventWorkspacePlanChanged, TargetType: "workspace", Metadata: `{"plan":"CLOUD_STARTER","previousPlan":"CLOUD_PRO"}`}, now)
	if plan.Action != "Changed plan" || plan.Detail != "Cloud Pro → Cloud Starter" {
		t.Errorf("plan row: %+v", plan)
	}
	made := newAuditRow(&btk.AuditEvent{Action: btk.EventWorkspaceCreated, TargetType: "workspace", Metadata: `{"name":"Acme","plan":"CLOUD_PRO"}`}, now)
	if made.Action != "Created workspace" || made.Target != "Workspace" || made.Detail != "“Acme” on Cloud Pro" {
		t.Errorf("workspace.created row: %+v", made)
	}
	limits := newAuditRow(&btk.AuditEvent{Action: btk.EventWorkspaceLimitsChanged, TargetType: "workspace", Metadata: `{"perMinute":60,"perDay":null,"previousPerMinute":null,"previousPerDay":null}`}, now)
	if limits.Detail != "default/min · default/day → 60/min · default/day" {
		t.Errorf("limits row: %+v", limits)
	}
	other := newAuditRow(&btk.AuditEvent{Action: "account.disabled", TargetType: "account", Metadata: `{}`}, now)
	if other.Action != "account.disabled" || other.Target != "account" {
		t.Errorf("unknown action row: %+v", other)
	}
}
