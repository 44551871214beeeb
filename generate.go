// Package btk holds schema.graphql, the one contract of the server and the
// client; `go generate ./...` regenerates both sides from it.
package btk

//go:generate go tool gqlgen generate
//go:generate go tool genqlient
