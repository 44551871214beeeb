//go:build !unix

package sqlite

import "os"

// lockFile is a no-op where flock is not available: run one btk serve per
// database there.
func lockFile(path string) (*os.File, error) { return nil, nil }
