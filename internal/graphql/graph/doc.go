// Package graph is gqlgen's output for schema.graphql: the executable schema
// and the models it does not take from internal/btk (gqlgen.yml binds those).
// Nothing here is written by hand; `go generate ./...` writes it again.
package graph
