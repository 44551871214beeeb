// Command btk is the workspace API key service and its client in one
// binary: `btk serve` runs the server (serve.go wires the store, the shared
// state and the HTTP handlers). Most other commands are small clients of
// the GraphQL API (internal/client), one file each: newXCmd builds the
// cobra command, and the larger ones keep their flags in an options struct
// and do the work in a runX function. A few never talk to a server: scan,
// backup and account reset-password (on the database itself), completion
// and version. The reference is docs/cli/, generated
// from these commands.
package main
