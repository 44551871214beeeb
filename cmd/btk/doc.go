// Command btk is the workspace API key service and its client in one
// binary: `btk serve` runs the server (serve.go wires the store, the shared
// state and the HTTP handlers); every other command is a small client of
// the GraphQL API, one file each, with an options struct and a run
// function. The reference is docs/cli/, generated from these commands.
package main
