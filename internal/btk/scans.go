package btk

import (
	"context"
	"time"
)

// MaxScans bounds the reads running at once on an instance that may walk
// much of a workspace's usage or audit rows: a workspace's usage series and
// top keys, and the audit lists (whose filters are not all indexed). Owners
// may ask for them as often as they like, and one such read over a year of
// a busy workspace's usage costs seconds; without a bound, one operation's
// aliases held every database reader of a SQLite instance, and every other
// account's requests waited behind them (docs/security.md).
const MaxScans = 2

// DefaultScanWait is how long a read waits for a scan slot before it is
// refused (Config.ScanWait).
const DefaultScanWait = 10 * time.Second

// ErrScansBusy refuses a read that waited ScanWait for a slot.
var ErrScansBusy = &Error{Code: CodeUnavailable, Message: "too many usage and audit reads are running; try again shortly"}

// scan takes one of the MaxScans slots, waiting at most the configured
// wait (or until ctx ends); release gives it back.
func (s *Service) scan(ctx context.Context) (release func(), err error) {
	select {
	case s.scans <- struct{}{}:
		return s.releaseScan, nil
	default:
	}
	t := time.NewTimer(s.cfg.ScanWait)
	defer t.Stop()
	select {
	case s.scans <- struct{}{}:
		return s.releaseScan, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, ErrScansBusy
	}
}

func (s *Service) releaseScan() { <-s.scans }
