package btk

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Webhooks (docs/webhooks.md): a workspace's owners subscribe URLs to its
// events; each audit_events row of the workspace (and api_key.expiring) is
// queued, in the transaction that writes it, as one delivery per subscribed
// webhook (the outbox); a worker (internal/events) delivers them.

// Event actions of the event stream beyond those of docs/design.md#audit.
const (
	EventWebhookCreated = "webhook.created"
	EventWebhookDeleted = "webhook.deleted"
	// EventKeyExpiring is sent 7 days and 1 day before a key's expiresAt
	// (once each); it is recorded in audit_events with actor "system".
	EventKeyExpiring = "api_key.expiring"
)

// Webhook bounds.
const (
	MaxWebhooksPerWorkspace = 10
	MaxWebhookEvents        = 32
	MaxWebhookURLLen        = 2048
	// WebhookRetryWindow is how long a delivery is retried.
	WebhookRetryWindow = 24 * time.Hour
	// WebhookSecretPrefix starts every signing secret.
	WebhookSecretPrefix = "whsec_"
	// MaxPendingPerWebhook bounds a webhook's backlog, its PENDING
	// deliveries (docs/webhooks.md#the-backlog-bound): an event that finds
	// the backlog full is not queued for that webhook but counted on it as
	// skipped, and as soon as the backlog has room again a
	// NoticeEventsSkipped delivery takes the place, naming the skipped
	// events' range in the audit log (which keeps every event). So one
	// workspace's outbox holds at most MaxWebhooksPerWorkspace times this.
	MaxPendingPerWebhook = 1000
)

// NoticeEventsSkipped is the type of the delivery that tells a webhook's
// receiver that events were not queued for it because its backlog was full
// (docs/webhooks.md#the-backlog-bound). It is no audit event: every webhook
// may receive it, whatever events it subscribes to.
const NoticeEventsSkipped = "webhook.events_skipped"

// Webhook is a workspace's subscription. The signing secret is stored sealed
// (AES-256-GCM under a key derived from the server secret); Sealed is that
// form and is never shown.
type Webhook struct {
	ID          string
	WorkspaceID string
	URL         string
	Events      []string // empty = every event
	Sealed      string
	CreatedAt   time.Time
	CreatedBy   string
	// LastAttemptAt is when the webhook's latest delivery attempt ended
	// (zero: none yet); FailingSince, when its attempts began to fail (nil:
	// the latest one succeeded, or none was made). Claims use both
	// (docs/webhooks.md#delivery).
	LastAttemptAt time.Time
	FailingSince  *time.Time
	// The backlog (docs/webhooks.md#the-backlog-bound). Pending is how many
	// of its deliveries are PENDING (at most MaxPendingPerWebhook, unless
	// more were pending when the bound came). Skipped counts the events
	// not queued for it since the last notice was queued, because the
	// backlog was full; SkippedSince and SkippedUntil are the times of the
	// oldest and the newest of them, SkippedFirst and SkippedLast the ids of
	// the first and the last skipped (zero while Skipped is 0). SkippedTotal
	// counts every event ever skipped for it.
	Pending                    int64
	Skipped                    int64
	SkippedSince, SkippedUntil time.Time
	SkippedFirst, SkippedLast  string
	SkippedTotal               int64
}

// Wants reports whether the webhook subscribes to the event type.
func (w *Webhook) Wants(eventType string) bool {
	return len(w.Events) == 0 || slices.Contains(w.Events, eventType) || slices.Contains(w.Events, "*")
}

// DeliveryStatus is the state of one delivery.
type DeliveryStatus string

const (
	DeliveryPending   DeliveryStatus = "PENDING"
	DeliveryDelivered DeliveryStatus = "DELIVERED"
	DeliveryFailed    DeliveryStatus = "FAILED" // gave up after WebhookRetryWindow
)

// WebhookDelivery is one event queued for one webhook (the outbox row).
type WebhookDelivery struct {
	ID            string
	WebhookID     string
	WorkspaceID   string
	EventID       string // the webhook-id header: the same on every retry
	EventType     string
	Payload       string // the JSON body, fixed when the event was written
	Status        DeliveryStatus
	Attempts      int
	NextAttemptAt time.Time
	// LastStatusCode is the receiver's last HTTP status (0: none, e.g. refused or timed out).
	LastStatusCode int
	LastError      string
	CreatedAt      time.Time
	DeliveredAt    *time.Time
	// URL and Sealed are the webhook's, filled in by ClaimWebhookDeliveries.
	URL    string
	Sealed string
	// Claim is the token the delivery was claimed under (ClaimDeliveries).
	Claim string
	// AttemptedAt is when the attempt being recorded ended (SettleDelivery).
	AttemptedAt time.Time
}

// OutboxStats are the outbox figures for metrics.
type OutboxStats struct {
	Pending int64
	// OldestPending is the creation time of the oldest undelivered delivery (nil: none).
	OldestPending *time.Time
	// Full counts the webhooks whose backlog is at MaxPendingPerWebhook;
	// Skipped, the events ever skipped for the existing webhooks
	// (Webhook.SkippedTotal summed).
	Full, Skipped int64
}

// DeliveryFilter pages through one webhook's deliveries, newest first.
type DeliveryFilter struct {
	WebhookID string
	Page
}

// webhookPayload is the body of every delivery (Standard Webhooks:
// {type, timestamp, data}); data is the audit event, never a secret.
type webhookPayload struct {
	Type      string         `json:"type"`
	Timestamp string         `json:"timestamp"`
	Data      webhookEventJS `json:"data"`
}

type webhookEventJS struct {
	ID             string          `json:"id"`
	WorkspaceID    string          `json:"workspaceId"`
	Action         string          `json:"action"`
	ActorID        string          `json:"actorId,omitempty"`
	ActorEmail     string          `json:"actorEmail"`
	ImpersonatorID string          `json:"impersonatorId,omitempty"`
	TargetType     string          `json:"targetType"`
	TargetID       string          `json:"targetId,omitempty"`
	Metadata       json.RawMessage `json:"metadata"`
	CreatedAt      string          `json:"createdAt"`
}

// WebhookPayload is the delivery body of an audit event.
func WebhookPayload(ev *AuditEvent) (string, error) {
	meta := json.RawMessage(ev.Metadata)
	if !json.Valid(meta) {
		meta = json.RawMessage("{}")
	}
	at := ev.CreatedAt.UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(webhookPayload{Type: ev.Action, Timestamp: at, Data: webhookEventJS{
		ID: ev.ID, WorkspaceID: ev.WorkspaceID, Action: ev.Action, ActorID: ev.ActorID, ActorEmail: ev.ActorEmail,
		ImpersonatorID: ev.ImpersonatorID, TargetType: ev.TargetType, TargetID: ev.TargetID,
		Metadata: meta, CreatedAt: at,
	}})
	return string(b), err
}

// QueueEvent returns the deliveries an audit event queues for the
// workspace's webhooks, and the webhooks whose backlog it changed (their
// Pending and Skipped fields updated, to be stored); stores call it where
// they write the event, in its transaction, with hooks read in that
// transaction and, where several writers may run at once (PostgreSQL),
// their rows locked: the decisions depend on the backlogs.
//
// For each webhook that wants the event (docs/webhooks.md#the-backlog-bound):
// a notice of events skipped before, if any and there is room; then the
// event's delivery if the backlog is below MaxPendingPerWebhook, or else
// the event counted on the webhook as skipped. The audit event itself is
// never changed.
func QueueEvent(ev *AuditEvent, hooks []*Webhook) ([]*WebhookDelivery, []*Webhook, error) {
	if ev.WorkspaceID == "" {
		return nil, nil, nil
	}
	var (
		out     []*WebhookDelivery
		changed []*Webhook
		payload string
	)
	for _, w := range hooks {
		if !w.Wants(ev.Action) {
			continue
		}
		changed = append(changed, w)
		n, err := SkippedNotice(w, ev.CreatedAt)
		if err != nil {
			return nil, nil, err
		}
		if n != nil {
			out = append(out, n)
		}
		if w.Pending >= MaxPendingPerWebhook {
			skipEvent(w, ev)
			continue
		}
		if payload == "" {
			if payload, err = WebhookPayload(ev); err != nil {
				return nil, nil, err
			}
		}
		w.Pending++
		out = append(out, &WebhookDelivery{
			ID: uuid.NewString(), WebhookID: w.ID, WorkspaceID: ev.WorkspaceID, EventID: "msg_" + ev.ID,
			EventType: ev.Action, Payload: payload, Status: DeliveryPending,
			NextAttemptAt: ev.CreatedAt, CreatedAt: ev.CreatedAt,
		})
	}
	return out, changed, nil
}

// skipEvent counts ev as skipped on w, whose backlog is full.
func skipEvent(w *Webhook, ev *AuditEvent) {
	if w.Skipped == 0 {
		w.SkippedSince, w.SkippedUntil, w.SkippedFirst = ev.CreatedAt, ev.CreatedAt, ev.ID
	}
	if ev.CreatedAt.Before(w.SkippedSince) {
		w.SkippedSince = ev.CreatedAt
	}
	if ev.CreatedAt.After(w.SkippedUntil) {
		w.SkippedUntil = ev.CreatedAt
	}
	w.SkippedLast = ev.ID
	w.Skipped++
	w.SkippedTotal++
}

// skippedNoticeJS is the body of a NoticeEventsSkipped delivery (Standard
// Webhooks: {type, timestamp, data}).
type skippedNoticeJS struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      SkippedEventsJS `json:"data"`
}

// SkippedEventsJS is the data of a NoticeEventsSkipped delivery
// (docs/webhooks.md#the-backlog-bound): Count events of the types the
// webhook subscribes to were not queued for it; each was written to the
// audit log at or after Since and before Until (so auditEvents(since:
// Since, until: Until) returns them, among others that were delivered:
// deduplicate by id). FirstEventID and LastEventID are the first and the
// last of them.
type SkippedEventsJS struct {
	WebhookID    string `json:"webhookId"`
	WorkspaceID  string `json:"workspaceId"`
	Count        int64  `json:"count"`
	Since        string `json:"since"`
	Until        string `json:"until"`
	FirstEventID string `json:"firstEventId"`
	LastEventID  string `json:"lastEventId"`
}

// SkippedNotice returns the NoticeEventsSkipped delivery of w's skipped
// events, and resets w's count of them, when it has skipped events and its
// backlog has room for the notice; else nil. The store inserts it and
// stores w (its rows locked, as for QueueEvent).
func SkippedNotice(w *Webhook, at time.Time) (*WebhookDelivery, error) {
	if w.Skipped == 0 || w.Pending >= MaxPendingPerWebhook {
		return nil, nil
	}
	b, err := json.Marshal(skippedNoticeJS{Type: NoticeEventsSkipped, Timestamp: at.UTC().Format(time.RFC3339Nano),
		Data: SkippedEventsJS{WebhookID: w.ID, WorkspaceID: w.WorkspaceID, Count: w.Skipped,
			Since:        w.SkippedSince.UTC().Format(time.RFC3339Nano),
			Until:        w.SkippedUntil.Add(time.Nanosecond).UTC().Format(time.RFC3339Nano),
			FirstEventID: w.SkippedFirst, LastEventID: w.SkippedLast}})
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	w.Pending++
	w.Skipped, w.SkippedSince, w.SkippedUntil, w.SkippedFirst, w.SkippedLast = 0, time.Time{}, time.Time{}, "", ""
	return &WebhookDelivery{ID: id, WebhookID: w.ID, WorkspaceID: w.WorkspaceID, EventID: "msg_" + id,
		EventType: NoticeEventsSkipped, Payload: string(b), Status: DeliveryPending, NextAttemptAt: at, CreatedAt: at}, nil
}

// WebhookBackoff is the wait after the given number of failed attempts:
// 5 s doubling to at most one hour, with up to 20 % jitter.
func WebhookBackoff(attempts int, jitter float64) time.Duration {
	d := 5 * time.Second
	for range max(attempts-1, 0) {
		d *= 2
		if d >= time.Hour {
			d = time.Hour
			break
		}
	}
	return d + time.Duration(float64(d)*0.2*jitter)
}

// webhookEventTypes are the event types of a workspace, in the order of
// docs/webhooks.md#events (a test checks that every event a workspace's
// webhook receives is one). Account events belong to no workspace.
var webhookEventTypes = []string{
	eventActions[AuditCreated], eventActions[AuditRotated], eventActions[AuditRevoked],
	eventActions[AuditRevokedAll], eventActions[AuditUpdated],
	EventKeyLeaked, EventCanaryUsed, EventKeyExpiring,
	EventSessionLogin, EventSessionElevated, EventSessionImpersonated,
	EventMembershipChanged, EventWorkspacePlanChanged, EventWorkspaceLimitsChanged, EventWorkspaceKeyPolicyChanged,
	EventWebhookCreated, EventWebhookDeleted,
}

// WebhookEventTypes returns the event types a webhook may subscribe to
// (besides "*", every event).
func WebhookEventTypes() []string { return slices.Clone(webhookEventTypes) }

// CreateWebhookResult is the new webhook and its signing secret, shown once.
type CreateWebhookResult struct {
	Webhook *Webhook
	Secret  string
}

// PrivateAddr reports whether a receiver at addr must be refused unless
// private receivers are allowed: loopback, private (RFC 1918, fc00::/7),
// link-local, unspecified, multicast, CGNAT (100.64/10), the other ranges
// that are not globally reachable (nonGlobalPrefixes) and the IPv4-mapped
// forms of them; every IPv6 address outside 2000::/3, the only block IANA
// allocates global unicast from (so a special-purpose block added later is
// refused before this list knows it); and the IPv6 forms that reach an IPv4
// address through a translation or an embedding: NAT64's 64:ff9b::/96 and
// 6to4's 2002::/16 when the IPv4 address inside is private (on a host with
// NAT64, [64:ff9b::a00:1] is 10.0.0.1), and every address of NAT64's
// local-use 64:ff9b:1::/48, Teredo's 2001::/32, the deprecated
// IPv4-compatible ::/96 and SIIT's IPv4-translated ::ffff:0:0:0/96 (RFC
// 2765; no current translator uses it, but one that still does makes
// [::ffff:0:a9fe:a9fe] the metadata address 169.254.169.254).
func PrivateAddr(addr netip.Addr) bool {
	addr = addr.Unmap()
	if addr.Is6() {
		b := addr.As16()
		switch {
		case nat64Prefix.Contains(addr):
			return PrivateAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFourPrefix.Contains(addr):
			return PrivateAddr(netip.AddrFrom4([4]byte(b[2:6])))
		case nat64LocalPrefix.Contains(addr), teredoPrefix.Contains(addr), ipv4CompatPrefix.Contains(addr),
			ipv4TranslatedPrefix.Contains(addr), !globalUnicastPrefix.Contains(addr):
			return true
		}
	}
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() ||
		addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() || addr.IsMulticast() ||
		addr.IsUnspecified() {
		return true
	}
	for _, p := range nonGlobalPrefixes {
		if p.Contains(addr) {
			return !slices.ContainsFunc(globalInNonGlobal, func(g netip.Prefix) bool { return g.Contains(addr) })
		}
	}
	return false
}

// nonGlobalPrefixes are the rows of IANA's IPv4 and IPv6 special-purpose
// address registries whose "Globally Reachable" is False or N/A (or that
// are deprecated with no answer) and that the netip predicates above do
// not cover: a receiver there is on the operator's own network, or
// nowhere. The IPv6 rows outside 2000::/3 are refused before this list is
// read; they are here so the list can be compared with the registry.
var nonGlobalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // this network
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments, with its anycast addresses (see globalInNonGlobal)
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated, RFC 7526), 6a44 relay anycast
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("100:0:0:1::/64"),  // dummy prefix (RFC 9780)
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments: benchmarking 2001:2::/48, ORCHID 2001:10::/28, ...
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("3fff::/20"),       // documentation (RFC 9637)
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs (RFC 9602)
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed by some networks)
}

// globalInNonGlobal are the blocks inside a nonGlobalPrefixes row that the
// registry lists as globally reachable networks of their own, so they are
// not refused: AMT, AS112-v6, ORCHIDv2 and DRIP. The anycast service
// addresses it also lists as reachable (PCP, TURN and DNS-SD SRP:
// 192.0.0.9-10, 2001:1::1-3) stay refused: the nearest server answers
// them, usually one on the operator's own network.
var globalInNonGlobal = []netip.Prefix{
	netip.MustParsePrefix("2001:3::/32"),     // AMT
	netip.MustParsePrefix("2001:4:112::/48"), // AS112-v6
	netip.MustParsePrefix("2001:20::/28"),    // ORCHIDv2
	netip.MustParsePrefix("2001:30::/28"),    // DRIP entity tags
}

var (
	nat64Prefix          = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalPrefix     = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFourPrefix      = netip.MustParsePrefix("2002::/16")
	teredoPrefix         = netip.MustParsePrefix("2001::/32")
	ipv4CompatPrefix     = netip.MustParsePrefix("::/96")
	ipv4TranslatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96")
	globalUnicastPrefix  = netip.MustParsePrefix("2000::/3")
)

// Resolver looks host names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// checkWebhookURL validates a receiver URL: http(s), a host, no user info,
// and (unless private receivers are allowed) no loopback, private or
// link-local address, literal or resolved. Delivery checks the address it
// dials again (DNS may change).
func (s *Service) checkWebhookURL(ctx context.Context, raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" || len(raw) > MaxWebhookURLLen {
		return "", badInput("url must be 1-%d characters", MaxWebhookURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", badInput("url must be an absolute http or https URL")
	}
	if u.User != nil {
		return "", badInput("url must not carry a user name or password")
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", badInput("url: the port must be 1-65535")
		}
	}
	u.Fragment = ""
	host := u.Hostname()
	if s.cfg.WebhookAllowPrivate {
		return u.String(), nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return "", badInput("webhook receivers on loopback or private addresses are refused (the server allows them with --webhook-allow-private)")
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		r := s.cfg.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		addrs, err = r.LookupNetIP(lctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return "", badInput("url: the host %q does not resolve", host)
		}
	}
	for _, a := range addrs {
		if PrivateAddr(a) {
			return "", badInput("webhook receivers on loopback or private addresses are refused (the server allows them with --webhook-allow-private)")
		}
	}
	return u.String(), nil
}

func checkWebhookEvents(events []string) ([]string, error) {
	if len(events) > MaxWebhookEvents {
		return nil, badInput("at most %d events", MaxWebhookEvents)
	}
	var out []string
	for _, e := range events {
		e = strings.TrimSpace(e)
		// An unknown type would make a webhook that never fires (a typo
		// was accepted silently).
		if e != "*" && !slices.Contains(webhookEventTypes, e) {
			return nil, badInput("unknown event type %q: the event types are %s, or * for every event (docs/webhooks.md#events)",
				truncate(e, 64), strings.Join(webhookEventTypes, ", "))
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if slices.Contains(out, "*") {
		return nil, nil
	}
	return out, nil
}

// CreateWebhook subscribes url to the workspace's events (all when events is
// empty). Owner tier. The secret is returned once.
func (s *Service) CreateWebhook(ctx context.Context, a *Actor, rawURL string, events []string) (*CreateWebhookResult, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	u, err := s.checkWebhookURL(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	evs, err := checkWebhookEvents(events)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	secret := WebhookSecretPrefix + base64.StdEncoding.EncodeToString(raw)
	w := &Webhook{ID: uuid.NewString(), WorkspaceID: a.WorkspaceID, URL: u, Events: evs,
		CreatedAt: s.now(), CreatedBy: a.AccountID}
	if w.Sealed, err = s.sealWebhookSecret(w.ID, secret); err != nil {
		return nil, err
	}
	if err := s.spendChange(ctx, a, ""); err != nil {
		return nil, err
	}
	err = s.store.Write(ctx, func(tx Tx) error {
		// Locks the workspace row (PostgreSQL), so the bound holds under
		// concurrent creates.
		if _, err := tx.Workspace(ctx, a.WorkspaceID); err != nil {
			return err
		}
		hooks, err := tx.Webhooks(ctx, a.WorkspaceID)
		if err != nil {
			return err
		}
		if len(hooks) >= MaxWebhooksPerWorkspace {
			return badInput("a workspace has at most %d webhooks", MaxWebhooksPerWorkspace)
		}
		if err := tx.CreateWebhook(ctx, w); err != nil {
			return err
		}
		return s.recordEvent(ctx, tx, a, a.WorkspaceID, EventWebhookCreated, "webhook", w.ID,
			requestMeta(a, map[string]any{"url": URLOrigin(w.URL), "events": w.Events}))
	})
	if err != nil {
		return nil, err
	}
	return &CreateWebhookResult{Webhook: w, Secret: secret}, nil
}

// Webhooks lists the workspace's webhooks, oldest first. Owner tier.
func (s *Service) Webhooks(ctx context.Context, a *Actor) ([]*Webhook, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, err
	}
	return read(ctx, s.store, func(tx Tx) ([]*Webhook, error) { return tx.Webhooks(ctx, a.WorkspaceID) })
}

// webhookOf reads a webhook of the actor's workspace (another workspace's
// is NOT_FOUND).
func webhookOf(ctx context.Context, tx Tx, a *Actor, id string) (*Webhook, error) {
	return inWorkspace(ctx, tx.Webhook, a.WorkspaceID, id)
}

// DeleteWebhook removes a webhook and its queued deliveries. Owner tier.
func (s *Service) DeleteWebhook(ctx context.Context, a *Actor, id string) error {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return err
	}
	return s.store.Write(ctx, func(tx Tx) error {
		w, err := webhookOf(ctx, tx, a, id)
		if err != nil {
			return err
		}
		if err := tx.DeleteWebhook(ctx, w.ID); err != nil {
			return err
		}
		return s.recordEvent(ctx, tx, a, a.WorkspaceID, EventWebhookDeleted, "webhook", w.ID,
			requestMeta(a, map[string]any{"url": URLOrigin(w.URL)}))
	})
}

// WebhookDeliveries pages through a webhook's deliveries, newest first. Owner tier.
func (s *Service) WebhookDeliveries(ctx context.Context, a *Actor, webhookID string, p Page) ([]*WebhookDelivery, string, error) {
	if err := authorize(a, permManageKeys, ""); err != nil {
		return nil, "", err
	}
	if err := checkPage(p); err != nil {
		return nil, "", err
	}
	var (
		out  []*WebhookDelivery
		next string
	)
	err := s.store.Read(ctx, func(tx Tx) (err error) {
		if _, err := webhookOf(ctx, tx, a, webhookID); err != nil {
			return err
		}
		out, next, err = tx.WebhookDeliveries(ctx, DeliveryFilter{WebhookID: webhookID, Page: p})
		return err
	})
	return out, next, err
}

// webhookKey is the AES-256 key that seals signing secrets, derived from the
// server secret.
func (s *Service) webhookKey() []byte {
	m := hmac.New(sha256.New, s.tokens.secret)
	m.Write([]byte("btk webhook signing secret v1"))
	return m.Sum(nil)
}

// webhookAEAD seals and opens webhooks' signing secrets (AES-GCM under
// webhookKey).
func (s *Service) webhookAEAD() (cipher.AEAD, error) {
	block, err := aes.NewCipher(s.webhookKey())
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (s *Service) sealWebhookSecret(id, secret string) (string, error) {
	gcm, err := s.webhookAEAD()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	return "v1:" + base64.StdEncoding.EncodeToString(gcm.Seal(nonce, nonce, []byte(secret), []byte(id))), nil
}

// ErrWebhookSecret says a sealed secret could not be opened: the server
// secret changed since the webhook was made (recreate the webhook).
var ErrWebhookSecret = errors.New("the webhook's signing secret cannot be opened with this server secret (it changed since the webhook was created: recreate the webhook)")

// OpenWebhookSecret returns the signing secret (whsec_…) of a delivery's webhook.
func (s *Service) OpenWebhookSecret(webhookID, sealed string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, "v1:")
	if !ok {
		return "", ErrWebhookSecret
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return "", ErrWebhookSecret
	}
	gcm, err := s.webhookAEAD()
	if err != nil {
		return "", err
	}
	if len(b) < gcm.NonceSize() {
		return "", ErrWebhookSecret
	}
	plain, err := gcm.Open(nil, b[:gcm.NonceSize()], b[gcm.NonceSize():], []byte(webhookID))
	if err != nil {
		return "", ErrWebhookSecret
	}
	return string(plain), nil
}

// SignWebhook returns the webhook-signature header value of Standard
// Webhooks: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)),
// the key being the base64-decoded part of the secret after "whsec_".
func SignWebhook(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, WebhookSecretPrefix))
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.", id, timestamp)
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

// Delivery work (internal/events runs it).

// DeliveryCaps bound the deliveries in flight (leased) that one claim
// round may bring a webhook or a workspace to; 0 is no cap.
type DeliveryCaps struct {
	// PerWebhook bounds a webhook's; PerFailingWebhook, that of a webhook
	// whose latest attempt failed (Webhook.FailingSince).
	PerWebhook, PerFailingWebhook int
	// PerWorkspace bounds a workspace's; FailingPerWorkspace, those of its
	// failing webhooks together.
	PerWorkspace, FailingPerWorkspace int
}

// MaxInFlightPerWebhook is how many deliveries of one webhook are in
// flight at once: a hanging receiver holds at most that many workers, and
// one that has failed (timed out) once holds 1.
const MaxInFlightPerWebhook = 2

// DefaultDeliveryCaps are the caps of a pool of workers
// (docs/webhooks.md#delivery): 2 per webhook, 1 per failing webhook, and a
// quarter of the workers but at least 3 per workspace, of which its failing
// webhooks together hold at most all but one. So one owner's hanging
// receivers and flood of events never hold every worker, and within the
// workspace neither one webhook nor its failing ones hold its whole share:
// a healthy webhook's deliveries and a failing one's due retries are still
// claimed. (A workspace cap equal to the webhook cap let one hanging
// receiver stall its workspace's other webhooks and retries for minutes.)
func DefaultDeliveryCaps(workers int) DeliveryCaps {
	ws := max(MaxInFlightPerWebhook+1, workers/4)
	return DeliveryCaps{PerWebhook: MaxInFlightPerWebhook, PerFailingWebhook: 1, PerWorkspace: ws, FailingPerWorkspace: ws - 1}
}

// ClaimDeliveries takes up to limit due deliveries for this instance for
// lease (no other instance takes them meanwhile) under the claim token,
// within caps.
func (s *Service) ClaimDeliveries(ctx context.Context, claim string, lease time.Duration, limit int, caps DeliveryCaps) ([]*WebhookDelivery, error) {
	var out []*WebhookDelivery
	err := s.store.Write(ctx, func(tx Tx) (err error) {
		out, err = tx.ClaimWebhookDeliveries(ctx, s.now(), lease, claim, limit, caps)
		return err
	})
	for _, d := range out {
		d.Claim = claim
	}
	return out, err
}

// SettleDelivery sets an attempt's outcome on d: delivered (2xx), or
// failed and retried later with backoff until WebhookRetryWindow has passed
// since the event, then FAILED. RecordDeliveries stores it.
func (s *Service) SettleDelivery(d *WebhookDelivery, statusCode int, errMsg string, jitter float64) {
	now := s.now()
	d.Attempts++
	d.AttemptedAt = now
	d.LastStatusCode, d.LastError = statusCode, truncate(errMsg, 256)
	switch {
	case statusCode >= 200 && statusCode < 300:
		d.Status, d.DeliveredAt, d.LastError = DeliveryDelivered, &now, ""
	case now.Sub(d.CreatedAt) >= WebhookRetryWindow:
		d.Status = DeliveryFailed
	default:
		d.Status = DeliveryPending
		d.NextAttemptAt = now.Add(WebhookBackoff(d.Attempts, jitter))
		if d.NextAttemptAt.Sub(d.CreatedAt) > WebhookRetryWindow {
			// One last attempt at the end of the window.
			d.NextAttemptAt = d.CreatedAt.Add(WebhookRetryWindow)
		}
	}
}

// WebhookOutcome is what a recorded batch of deliveries did to one webhook
// (Tx.RecordWebhookOutcome).
type WebhookOutcome struct {
	WebhookID string
	// AttemptedAt is when the webhook's latest attempt in the batch ended
	// (zero: none), OK whether it succeeded.
	AttemptedAt time.Time
	OK          bool
	// Finished counts its deliveries that left PENDING (DELIVERED or FAILED).
	Finished int
	// Now is when the batch is recorded: the time of a notice it queues.
	Now time.Time
}

// Apply applies the outcome to w, read with its row locked: the latest
// attempt, when (and whether it failed: the claims' fairness,
// docs/webhooks.md#delivery), unless a later one is recorded already; the
// finished deliveries off its backlog; and, if events were skipped and
// there is room now, their notice, returned for the store to queue
// (docs/webhooks.md#the-backlog-bound). The store then stores w.
func (o WebhookOutcome) Apply(w *Webhook) (*WebhookDelivery, error) {
	if !o.AttemptedAt.IsZero() && !o.AttemptedAt.Before(w.LastAttemptAt) {
		w.LastAttemptAt = o.AttemptedAt
		switch {
		case o.OK:
			w.FailingSince = nil
		case w.FailingSince == nil:
			at := o.AttemptedAt
			w.FailingSince = &at
		}
	}
	w.Pending = max(w.Pending-int64(o.Finished), 0)
	return SkippedNotice(w, o.Now)
}

// RecordDeliveries stores settled deliveries in one transaction (each under
// its own claim: one whose claim was lost, because another instance took it
// after the lease ran out, is left as it is), then each webhook's outcome:
// its latest attempt, whether it failed, and when (the claims' fairness,
// docs/webhooks.md#delivery), and the places the finished deliveries free
// in its backlog (docs/webhooks.md#the-backlog-bound).
func (s *Service) RecordDeliveries(ctx context.Context, ds []*WebhookDelivery) error {
	latest := map[string]*WebhookDelivery{}
	for _, d := range ds {
		if l := latest[d.WebhookID]; l == nil || !d.AttemptedAt.Before(l.AttemptedAt) {
			latest[d.WebhookID] = d
		}
	}
	// The webhook rows after every delivery row and in id order, as every
	// recorder (and every writer of an event) takes them: two instances'
	// batches never wait for each other in a cycle (PostgreSQL). The
	// delivery rows in id order too, as a webhook's deletion locks them:
	// in the order the attempts ended, the two deadlocked.
	hooks := slices.Sorted(maps.Keys(latest))
	byID := slices.SortedFunc(slices.Values(ds), func(a, b *WebhookDelivery) int { return strings.Compare(a.ID, b.ID) })
	return s.store.Write(ctx, func(tx Tx) error {
		finished := map[string]int{}
		for _, d := range byID {
			done, err := tx.FinishWebhookDelivery(ctx, d, d.Claim)
			if err != nil {
				return err
			}
			if done {
				finished[d.WebhookID]++
			}
		}
		now := s.now()
		for _, id := range hooks {
			d := latest[id] // AttemptedAt is zero when not settled by SettleDelivery
			if d.AttemptedAt.IsZero() && finished[id] == 0 {
				continue
			}
			if err := tx.RecordWebhookOutcome(ctx, WebhookOutcome{WebhookID: id, AttemptedAt: d.AttemptedAt,
				OK: d.Status == DeliveryDelivered, Finished: finished[id], Now: now}); err != nil {
				return err
			}
		}
		return nil
	})
}

// FinishDelivery settles and records one delivery.
func (s *Service) FinishDelivery(ctx context.Context, d *WebhookDelivery, statusCode int, errMsg string, jitter float64) error {
	s.SettleDelivery(d, statusCode, errMsg, jitter)
	return s.RecordDeliveries(ctx, []*WebhookDelivery{d})
}

// OutboxStats reads the outbox figures.
func (s *Service) OutboxStats(ctx context.Context) (OutboxStats, error) {
	return read(ctx, s.store, func(tx Tx) (OutboxStats, error) { return tx.OutboxStats(ctx, s.now()) })
}

// expiryNoticeBatch bounds the keys one sweep transaction notices.
const expiryNoticeBatch = 200

// SweepExpiringKeys records api_key.expiring (actor "system") for active
// keys 7 days and 1 day before their expiresAt, once each across all
// instances (a conditional update of the key's notice mark, in the event's
// transaction). A key noticed late (made with under a day left) gets only
// the 1-day notice. It returns how many notices it wrote.
func (s *Service) SweepExpiringKeys(ctx context.Context) (int, error) {
	total := 0
	for range 50 {
		n := 0
		err := s.store.Write(ctx, func(tx Tx) error {
			now := s.now()
			keys, err := tx.ExpiringKeys(ctx, now, now.Add(7*24*time.Hour), now.Add(24*time.Hour), expiryNoticeBatch)
			if err != nil {
				return err
			}
			for _, k := range keys {
				days := 7
				if k.ExpiresAt.Sub(now) <= 24*time.Hour {
					days = 1
				}
				ok, err := tx.MarkExpiryNotice(ctx, k.ID, days)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				sys := &Actor{Email: "system"}
				if err := s.recordEvent(ctx, tx, sys, k.WorkspaceID, EventKeyExpiring, "api_key", k.ID, map[string]any{
					"name": k.Name, "displayPrefix": k.DisplayPrefix, "hint": k.Hint,
					"expiresAt": k.ExpiresAt.UTC().Format(time.RFC3339), "daysBefore": days,
				}); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		total += n
		if err != nil || n < expiryNoticeBatch {
			return total, err
		}
	}
	return total, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
