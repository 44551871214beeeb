package graphql

import (
	"context"
	"slices"

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
	return selectedAt(ctx, "", name)
}

// selectedAt reports whether the field being resolved asks, in its child
// field under ("" for its own selection), for any of the fields names
// (aliases, fragments and conditions included).
func selectedAt(ctx context.Context, under string, names ...string) bool {
	fields := graphql.CollectFieldsCtx(ctx, nil)
	if under != "" {
		oc := graphql.GetOperationContext(ctx)
		var below []graphql.CollectedField
		for _, f := range fields {
			if f.Name == under {
				below = append(below, graphql.CollectFields(oc, f.Selections, nil)...)
			}
		}
		fields = below
	}
	for _, f := range fields {
		if slices.Contains(names, f.Name) {
			return true
		}
	}
	return false
}
