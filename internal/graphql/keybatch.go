package graphql

import (
	"context"
	"strings"
	"sync"

	gql "github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/graphql/graph"
)

// An ApiKey's lastUsedIp, lastUsedUserAgent and usage are read beyond the
// key. Each was a resolver of its own, a read transaction per row, run at
// once for every row: six aliases of apiKeys(first: 500) with lastUsedIp
// and lastUsedUserAgent were 6,000 transactions, about 0.5 s of CPU, for an
// ADMIN (docs/security.md#bounds-on-a-request). Now every list of keys in
// an answer (a page, the top keys, a mutation's key) is converted by
// apiKeys as one batch: the last clients of all its keys are read in one
// statement when the list asks for them, and the first row that asks for a
// usage series reads the list's series of that range in one statement, for
// the others to take their part.

// keyBatches are the batches of an operation's answer, by the keys they
// hold.
type keyBatches struct {
	mu sync.Mutex
	of map[*graph.APIKey]*keyBatch
}

type keyBatchesKey struct{}

// withKeyBatches gives an operation its key batches.
func withKeyBatches(ctx context.Context, next gql.OperationHandler) gql.ResponseHandler {
	return next(context.WithValue(ctx, keyBatchesKey{}, &keyBatches{of: map[*graph.APIKey]*keyBatch{}}))
}

// keyBatch is one list of keys of the answer.
type keyBatch struct {
	keys  []*btk.APIKey
	mu    sync.Mutex
	usage map[string]*usageLoad // by fieldPosition
}

// usageLoad is the usage series of a batch's keys for one usage field of
// the answer.
type usageLoad struct {
	once sync.Once
	byID map[string][]btk.UsageCount
	err  error
}

// fieldPosition names the field being resolved by its path in the answer
// without list indexes: the same for every row of a list, and different
// for each usage field (aliases, aliased lists), whose points are each
// spent and answered.
func fieldPosition(ctx context.Context) string {
	var b strings.Builder
	for _, el := range gql.GetFieldContext(ctx).Path() {
		if name, ok := el.(ast.PathName); ok {
			b.WriteString(string(name))
			b.WriteByte('/')
		}
	}
	return b.String()
}

// apiKeys converts keys for the answer of the field being resolved: they
// are the objects at under in its value ("nodes" of a connection, "apiKey"
// of a payload, "" for the value itself), one batch. The last clients of all
// of them are read in one statement when lastUsedIp or lastUsedUserAgent is
// asked for there; a failure of that read leaves the two fields null, with
// the error, and the keys answered.
func (r *Resolver) apiKeys(ctx context.Context, under string, keys ...*btk.APIKey) []*graph.APIKey {
	now := r.svc.Now()
	out := make([]*graph.APIKey, len(keys))
	for i, k := range keys {
		out[i] = apiKey(k, now)
	}
	if len(keys) == 0 {
		return out
	}
	if selectedAt(ctx, under, "lastUsedIp", "lastUsedUserAgent") {
		clients, err := r.svc.LastClients(ctx, btk.ActorFrom(ctx), keys)
		if err != nil {
			// Marked as a resolver's failure: internal unless the domain
			// made it (presentError).
			gql.AddError(ctx, &resolverError{err})
		}
		for _, k := range out {
			if c := clients[k.ID]; c != nil {
				k.LastUsedIP, k.LastUsedUserAgent = &c.IP, &c.UserAgent
			}
		}
	}
	if bs, ok := ctx.Value(keyBatchesKey{}).(*keyBatches); ok && selectedAt(ctx, under, "usage") {
		b := &keyBatch{keys: keys}
		bs.mu.Lock()
		for _, k := range out {
			bs.of[k] = b
		}
		bs.mu.Unlock()
	}
	return out
}

// batchOf returns the batch the key of the answer belongs to, or nil.
func batchOf(ctx context.Context, k *graph.APIKey) *keyBatch {
	bs, ok := ctx.Value(keyBatchesKey{}).(*keyBatches)
	if !ok {
		return nil
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.of[k]
}

// keyUsage is the usage series of k over rng: read for its whole batch by
// the first row asking, after the points of every row of the batch are
// taken from the operation's budget (spendUsagePoints), once for each usage
// field of the answer: ten aliases of one series are ten series' points.
func (r *Resolver) keyUsage(ctx context.Context, k *graph.APIKey, rng btk.UsageRange) ([]btk.UsageCount, error) {
	a := btk.ActorFrom(ctx)
	b := batchOf(ctx, k)
	if b == nil { // not converted by apiKeys: a read of its own
		if err := spendUsagePoints(ctx, rng, r.svc.Now(), 1); err != nil {
			return nil, err
		}
		return r.svc.KeyUsage(ctx, a, k.ID, rng)
	}
	key := fieldPosition(ctx)
	b.mu.Lock()
	if b.usage == nil {
		b.usage = map[string]*usageLoad{}
	}
	load := b.usage[key]
	if load == nil {
		load = &usageLoad{}
		b.usage[key] = load
	}
	b.mu.Unlock()
	load.once.Do(func() {
		if load.err = spendUsagePoints(ctx, rng, r.svc.Now(), len(b.keys)); load.err != nil {
			return
		}
		load.byID, load.err = r.svc.KeysUsage(ctx, a, b.keys, rng)
	})
	return load.byID[k.ID], load.err
}
