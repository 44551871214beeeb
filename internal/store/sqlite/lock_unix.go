//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on path+".lock" for as long as the process
// holds the returned file. Each btk serve caches key records in memory, so a
// second process on the same database would keep accepting keys the first
// one revoked: it must not start.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600) // #nosec G304 -- the lock beside the database file the operator named (--db)
	if err != nil {
		return nil, fmt.Errorf("store: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store: %s is in use by another btk process (one server per database)", path)
		}
		return nil, fmt.Errorf("store: lock: %w", err)
	}
	return f, nil
}
