package graphql

import (
	"context"
	"sync/atomic"
	"time"

	gql "github.com/99designs/gqlgen/graphql"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/graphql/graph"
)

// maxUsagePoints bounds the usage points one operation returns, whatever
// list the usage field sits in (apiKeys of 500 keys, aliases): a full series
// is at most 2,160 points (90 days of hours), so one operation may ask for
// several, or a week of days for every key of a page (docs/usage.md).
const maxUsagePoints = 20_000

type usageBudgetKey struct{}

// withUsageBudget gives an operation its usage point budget.
func withUsageBudget(ctx context.Context, next gql.OperationHandler) gql.ResponseHandler {
	return next(context.WithValue(ctx, usageBudgetKey{}, new(atomic.Int64)))
}

// spendUsagePoints takes the points of n series of r (a list of keys asks
// for its series at once) from the operation's budget, or refuses. It is
// called before the series are read: a refused series costs no read and no
// allocation (spent after the read, a page of 500 keys read 500 series and
// built a million points to answer 9 of them).
func spendUsagePoints(ctx context.Context, r btk.UsageRange, now time.Time, n int) error {
	per, err := r.Points(now)
	if err != nil {
		return err
	}
	b, _ := ctx.Value(usageBudgetKey{}).(*atomic.Int64)
	if b != nil && b.Add(int64(per)*int64(n)) > maxUsagePoints {
		return btk.Errorf(btk.CodeBadUserInput, "the operation asks for more than %d usage points: ask for fewer keys or a shorter range", maxUsagePoints)
	}
	return nil
}

func usageRange(since, until *time.Time, g *btk.Granularity) btk.UsageRange {
	r := btk.UsageRange{Since: since, Until: until}
	if g != nil {
		r.Granularity = *g
	}
	return r
}

func usagePoints(pts []btk.UsageCount) []*graph.UsagePoint {
	out := make([]*graph.UsagePoint, len(pts))
	for i, p := range pts {
		out[i] = &graph.UsagePoint{Start: p.Start, Accepted: int(p.Accepted), RateLimited: int(p.RateLimited), Refused: int(p.Refused)}
	}
	return out
}
