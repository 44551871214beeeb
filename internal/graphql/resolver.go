package graphql

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/btk-project/btk/internal/btk"
)

// Resolver is the root of the GraphQL resolvers: each one reads the actor
// from the context, calls the service, and converts the result.
type Resolver struct {
	svc *btk.Service
}

// selected reports whether the field being resolved asks for its child
// field name, so that a resolver reads for that child only when it is asked
// for (fragments and conditions included).
func selected(ctx context.Context, name string) bool {
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		if f.Name == name {
			return true
		}
	}
	return false
}
