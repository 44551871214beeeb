package client

import (
	"context"
	"time"

	"github.com/Khan/genqlient/graphql"
)

// MaxChainKeys bounds the keys RotationChainUsage reads, one request each:
// a key rotated every day for years stays answerable, a corrupted chain
// cannot keep the command going.
const MaxChainKeys = 1000

// RotationChainUsage returns the series of every key of k's rotation chain
// (the keys it replaced and those that replaced it, by rotatedFromId and
// replacedById), k included, newest first, each over the same range. A
// rotation keeps the name, so this is what a name has meant over time: the
// refused uses of a revoked predecessor are counted on that key, not on k
// (docs/usage.md#what-is-counted). cut reports that the chain had more than
// MaxChainKeys keys; the ones farthest from k are left out.
func RotationChainUsage(ctx context.Context, c graphql.Client, k KeyUsageSeries, since, until *time.Time, g *UsageGranularity) (chain []KeyUsageSeries, cut bool, err error) {
	seen := map[string]bool{k.Id: true}
	walk := func(next func(KeyUsageSeries) *string) ([]KeyUsageSeries, error) {
		var keys []KeyUsageSeries
		for cur := k; ; {
			id := next(cur)
			if id == nil || seen[*id] {
				return keys, nil
			}
			if len(seen) >= MaxChainKeys {
				cut = true
				return keys, nil
			}
			resp, err := KeyUsage(ctx, c, *id, since, until, g)
			if err != nil {
				return nil, err
			}
			if resp.ApiKey == nil { // not visible: the chain ends here for us
				return keys, nil
			}
			cur = *resp.ApiKey
			seen[cur.Id] = true
			keys = append(keys, cur)
		}
	}
	newer, err := walk(func(k KeyUsageSeries) *string { return k.ReplacedById })
	if err != nil {
		return nil, false, err
	}
	older, err := walk(func(k KeyUsageSeries) *string { return k.RotatedFromId })
	if err != nil {
		return nil, false, err
	}
	for i := len(newer) - 1; i >= 0; i-- {
		chain = append(chain, newer[i])
	}
	chain = append(chain, k)
	return append(chain, older...), cut, nil
}

// SumUsage adds series of the same range point by point (by start).
func SumUsage(series ...[]UsagePoint) []UsagePoint {
	var sum []UsagePoint
	at := map[time.Time]int{}
	for _, pts := range series {
		for _, pt := range pts {
			i, ok := at[pt.Start.UTC()]
			if !ok {
				i = len(sum)
				at[pt.Start.UTC()] = i
				sum = append(sum, UsagePoint{Start: pt.Start})
			}
			sum[i].Accepted += pt.Accepted
			sum[i].RateLimited += pt.RateLimited
			sum[i].Refused += pt.Refused
		}
	}
	return sum
}
