package main

// The CLI reference in docs/cli is generated from the command tree by
// TestCLIReference (clidocs_test.go): `go generate ./...` rewrites it, and the
// test fails when the committed files are stale.
//go:generate go test -run ^TestCLIReference$ -count=1 . -args -update-cli-docs
