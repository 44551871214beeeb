package btk

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Granularity is the period of a usage series.
type Granularity string

const (
	GranularityHour Granularity = "HOUR"
	GranularityDay  Granularity = "DAY"
)

// Bounds of a usage series, so that an answer stays bounded: 90 days of
// hours, 366 days of days.
const (
	MaxUsageHours = 90 * 24
	MaxUsageDays  = 366
	// MaxTopKeys bounds workspaceUsage's topKeys.
	MaxTopKeys = 100
)

// UsageRange asks for a usage series: nil Until means now; nil Since means
// 7 days (DAY) or 24 hours (HOUR) before Until.
type UsageRange struct {
	Since, Until *time.Time
	Granularity  Granularity
}

func (g Granularity) period() time.Duration {
	if g == GranularityHour {
		return time.Hour
	}
	return 24 * time.Hour
}

// resolve returns the range's first period start and the end of its last
// period (UTC, whole periods), checking its bounds.
func (r UsageRange) resolve(now time.Time) (since, until time.Time, g Granularity, err error) {
	g = r.Granularity
	switch g {
	case "":
		g = GranularityDay
	case GranularityHour, GranularityDay:
	default:
		return since, until, g, badInput("granularity must be HOUR or DAY")
	}
	p := g.period()
	until = now.UTC()
	if r.Until != nil {
		until = r.Until.UTC()
	}
	if r.Since != nil {
		since = r.Since.UTC()
	} else if g == GranularityHour {
		since = until.Add(-24 * time.Hour)
	} else {
		since = until.Add(-7 * 24 * time.Hour)
	}
	since = since.Truncate(p)
	if t := until.Truncate(p); !t.Equal(until) || !until.After(since) {
		until = t.Add(p) // the period holding until, included
	}
	// Before anything else looks at them: a since in year 1 has just become
	// the zero time, which a store takes for a bug (INTERNAL), and the
	// rounding may have crossed a bound.
	if !StoredTime(since) || !StoredTime(until) {
		return since, until, g, ErrTimeRange
	}
	if !until.After(since) {
		return since, until, g, errEmptyRange
	}
	n := int64(until.Sub(since) / p)
	if g == GranularityHour && n > MaxUsageHours {
		return since, until, g, badInput("at most %d hours (90 days) per series; ask for DAY", MaxUsageHours)
	}
	if g == GranularityDay && n > MaxUsageDays {
		return since, until, g, badInput("at most %d days per series", MaxUsageDays)
	}
	return since, until, g, nil
}

// Points is the number of points the range's series has at now (one per
// period, zeros included), known before anything is read: a caller that
// bounds the points of an answer spends them before asking for the series.
func (r UsageRange) Points(now time.Time) (int, error) {
	since, until, g, err := r.resolve(now)
	if err != nil {
		return 0, err
	}
	return int(until.Sub(since) / g.period()), nil
}

// bucket turns hourly rows (oldest first) into one point per period of
// [since, until), zeros included.
func bucket(rows []UsageCount, since, until time.Time, g Granularity) []UsageCount {
	p := g.period()
	n := int(until.Sub(since) / p)
	out := make([]UsageCount, n)
	for i := range out {
		out[i].Start = since.Add(time.Duration(i) * p)
	}
	for _, r := range rows {
		i := int(r.Start.Sub(since) / p)
		if r.Start.Before(since) || i >= n {
			continue
		}
		out[i].Accepted += r.Accepted
		out[i].RateLimited += r.RateLimited
		out[i].Refused += r.Refused
	}
	return out
}

// KeyUsage returns the usage of the key keyID per period of r, one point per
// period (zeros included), oldest first. The actor must be able to read the
// key (a platform admin any key).
func (s *Service) KeyUsage(ctx context.Context, a *Actor, keyID string, r UsageRange) ([]UsageCount, error) {
	if err := s.mayReadUsage(a); err != nil {
		return nil, err
	}
	since, until, g, err := r.resolve(s.now())
	if err != nil {
		return nil, err
	}
	// One series reads only its key's rows, but a page of keys asks for
	// hundreds at once: they take the workspace's turn like its other
	// scans, so that one workspace's lists never keep every core busy
	// (docs/usage.md).
	release, err := s.scan(ctx, a.WorkspaceID)
	if err != nil {
		return nil, err
	}
	defer release()
	var rows []UsageCount
	err = s.store.Read(ctx, func(tx Tx) error {
		k, err := s.usageKey(ctx, tx, a, keyID)
		if err != nil {
			return err
		}
		rows, err = tx.UsageSeries(ctx, UsageFilter{WorkspaceID: k.WorkspaceID, KeyID: k.ID, Since: since, Until: until})
		return err
	})
	if err != nil {
		return nil, err
	}
	return bucket(rows, since, until, g), nil
}

// UsageSeries is a usage series with the range it covers.
type UsageSeries struct {
	Since, Until time.Time
	Granularity  Granularity
	Points       []UsageCount
}

// WorkspaceUsage is the usage of the actor's workspace, summed over its
// keys, per period of r.
func (s *Service) WorkspaceUsage(ctx context.Context, a *Actor, r UsageRange) (*UsageSeries, error) {
	if err := authorize(a, permReadKeys, ""); err != nil {
		return nil, err
	}
	since, until, g, err := r.resolve(s.now())
	if err != nil {
		return nil, err
	}
	release, err := s.scan(ctx, a.WorkspaceID)
	if err != nil {
		return nil, err
	}
	defer release()
	rows, err := read(ctx, s.store, func(tx Tx) ([]UsageCount, error) {
		return tx.UsageSeries(ctx, UsageFilter{WorkspaceID: a.WorkspaceID, Since: since, Until: until})
	})
	if err != nil {
		return nil, err
	}
	return &UsageSeries{Since: since, Until: until, Granularity: g, Points: bucket(rows, since, until, g)}, nil
}

// KeyTotal is one key's totals over a range.
type KeyTotal struct {
	Key *APIKey
	UsageCount
}

// TopKeys returns the first keys of the actor's workspace with the most uses
// in r (accepted, rate-limited and refused together), most first.
func (s *Service) TopKeys(ctx context.Context, a *Actor, r UsageRange, first int) ([]KeyTotal, error) {
	if err := authorize(a, permReadKeys, ""); err != nil {
		return nil, err
	}
	if first < 1 || first > MaxTopKeys {
		return nil, badInput("first must be 1-%d", MaxTopKeys)
	}
	since, until, _, err := r.resolve(s.now())
	if err != nil {
		return nil, err
	}
	release, err := s.scan(ctx, a.WorkspaceID)
	if err != nil {
		return nil, err
	}
	defer release()
	var out []KeyTotal
	err = s.store.Read(ctx, func(tx Tx) error {
		rows, err := tx.TopKeys(ctx, UsageFilter{WorkspaceID: a.WorkspaceID, Since: since, Until: until}, first)
		if err != nil {
			return err
		}
		for _, row := range rows {
			k, err := tx.APIKey(ctx, row.KeyID)
			if err != nil {
				return err
			}
			out = append(out, KeyTotal{Key: k, UsageCount: row})
		}
		return nil
	})
	return out, err
}

// LastClient returns who last used the key keyID (accepted), or nil.
func (s *Service) LastClient(ctx context.Context, a *Actor, keyID string) (*KeyClient, error) {
	if err := s.mayReadUsage(a); err != nil {
		return nil, err
	}
	var c *KeyClient
	err := s.store.Read(ctx, func(tx Tx) error {
		k, err := s.usageKey(ctx, tx, a, keyID)
		if err != nil {
			return err
		}
		c, err = tx.KeyClient(ctx, k.ID)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return c, err
}

// LastClients returns who last used each of keys (accepted), by key id, in
// one read: a page of keys asks for hundreds at once, and one read per key
// was a transaction per row (docs/security.md#bounds-on-a-request). A key never
// used, or one the actor may not read (another workspace's, unless a
// platform admin asks), has none.
func (s *Service) LastClients(ctx context.Context, a *Actor, keys []*APIKey) (map[string]*KeyClient, error) {
	if err := s.mayReadUsage(a); err != nil {
		return nil, err
	}
	groups := readableKeys(a, keys)
	out := make(map[string]*KeyClient, len(keys))
	if len(groups) == 0 {
		return out, nil
	}
	err := s.store.Read(ctx, func(tx Tx) error {
		for _, g := range groups {
			for ids := range slices.Chunk(g.ids, MaxPageSize) {
				cs, err := tx.KeyClients(ctx, g.workspaceID, ids)
				if err != nil {
					return err
				}
				for i := range cs {
					out[cs[i].KeyID] = &cs[i]
				}
			}
		}
		return nil
	})
	return out, err
}

// KeysUsage is KeyUsage for a list of keys (a page of keys, a workspace's
// top keys) in one read and one scan turn: the usage of each key per period
// of r, by key id, one point per period (zeros included), oldest first. A
// key the actor may not read is left out.
func (s *Service) KeysUsage(ctx context.Context, a *Actor, keys []*APIKey, r UsageRange) (map[string][]UsageCount, error) {
	if err := s.mayReadUsage(a); err != nil {
		return nil, err
	}
	since, until, g, err := r.resolve(s.now())
	if err != nil {
		return nil, err
	}
	groups := readableKeys(a, keys)
	rows := map[string][]UsageCount{}
	if len(groups) > 0 {
		release, err := s.scan(ctx, a.WorkspaceID)
		if err != nil {
			return nil, err
		}
		defer release()
		err = s.store.Read(ctx, func(tx Tx) error {
			clear(rows)
			for _, grp := range groups {
				f := UsageFilter{WorkspaceID: grp.workspaceID, Since: since, Until: until}
				for ids := range slices.Chunk(grp.ids, MaxPageSize) {
					counts, err := tx.KeyUsageSeries(ctx, f, ids, g.period())
					if err != nil {
						return err
					}
					for _, c := range counts {
						rows[c.KeyID] = append(rows[c.KeyID], c)
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make(map[string][]UsageCount, len(keys))
	for _, grp := range groups {
		for _, id := range grp.ids {
			out[id] = bucket(rows[id], since, until, g)
		}
	}
	return out, nil
}

// keyGroup is the ids of keys of one workspace.
type keyGroup struct {
	workspaceID string
	ids         []string
}

// readableKeys groups the distinct ids of the keys the actor may read by
// workspace: its own workspace's, or any for a platform admin.
func readableKeys(a *Actor, keys []*APIKey) []keyGroup {
	var groups []keyGroup
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k == nil || seen[k.ID] || (k.WorkspaceID != a.WorkspaceID && !a.PlatformAdmin) {
			continue
		}
		seen[k.ID] = true
		i := slices.IndexFunc(groups, func(g keyGroup) bool { return g.workspaceID == k.WorkspaceID })
		if i < 0 {
			i = len(groups)
			groups = append(groups, keyGroup{workspaceID: k.WorkspaceID})
		}
		groups[i].ids = append(groups[i].ids, k.ID)
	}
	return groups
}

// mayReadUsage: who may read a key may read its usage; a platform admin may
// read any key's (it can find any key by its hash).
func (s *Service) mayReadUsage(a *Actor) error {
	if a != nil && a.IsUser() && a.PlatformAdmin {
		return nil
	}
	return authorize(a, permReadKeys, "")
}

// usageKey reads the key whose usage is asked for: the actor's workspace's,
// or any for a platform admin.
func (s *Service) usageKey(ctx context.Context, tx Tx, a *Actor, keyID string) (*APIKey, error) {
	if a.PlatformAdmin {
		if uuid.Validate(keyID) != nil {
			return nil, ErrNotFound
		}
		return tx.APIKey(ctx, keyID)
	}
	return ownKey(ctx, tx, a, keyID)
}
