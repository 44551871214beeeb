package graphql

import "github.com/btk-project/btk/internal/btk"

// Resolver is the root of the GraphQL resolvers: each one reads the actor
// from the context, calls the service, and converts the result.
type Resolver struct {
	svc *btk.Service
}
