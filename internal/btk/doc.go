// Package btk is the domain of the workspace API key service: the rules and
// nothing else. It holds the records (workspaces, accounts, memberships,
// keys, sessions, audit entries), the key format and its hashing, roles and
// plans, elevation, the error codes every surface maps (errors.go), and the
// Service whose methods are the operations of the GraphQL API, the CLI and
// the dashboard.
//
// It knows no HTTP and no SQL. What it needs from outside is an interface
// declared here and implemented elsewhere: Store (internal/store/sqlite,
// internal/store/postgres, one conformance suite), and the state several
// instances share — KeyGate and Throttle — in memory for one node or in
// Redis (internal/redisstate) for a cluster. The rules are written down in
// docs/design.md.
package btk
