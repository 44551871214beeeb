package btk

import (
	"context"
	"sync"
	"time"
)

// MaxScans bounds the reads running at once on an instance that may walk
// much of a workspace's usage or audit rows: a workspace's usage series and
// top keys, and the audit lists (whose filters are not all indexed). Owners
// may ask for them as often as they like, and one such read over a year of
// a busy workspace's usage costs seconds; without a bound, one operation's
// aliases held every database reader of a SQLite instance, and every other
// account's requests waited behind them. A workspace's reads also take its
// turn (one at a time), so that its members, asking in a loop, never hold
// every slot while other workspaces wait (docs/security.md).
const MaxScans = 2

// DefaultScanWait is how long a read waits for a scan slot before it is
// refused (Config.ScanWait).
const DefaultScanWait = 10 * time.Second

// ErrScansBusy refuses a read that waited ScanWait for a slot.
var ErrScansBusy = &Error{Code: CodeUnavailable, Message: "too many usage and audit reads are running; try again shortly"}

// scan takes the turn of workspaceID ("" for the server-wide trail) and one
// of the MaxScans slots, waiting at most the configured wait for both (or
// until ctx ends); release gives them back.
func (s *Service) scan(ctx context.Context, workspaceID string) (release func(), err error) {
	turn := s.scanTurns.join(workspaceID)
	wait := time.NewTimer(s.cfg.ScanWait)
	defer wait.Stop()
	if err := takeSlot(ctx, turn.held, wait.C); err != nil {
		s.scanTurns.leave(workspaceID, turn)
		return nil, err
	}
	if err := takeSlot(ctx, s.scans, wait.C); err != nil {
		<-turn.held
		s.scanTurns.leave(workspaceID, turn)
		return nil, err
	}
	return func() {
		<-s.scans
		<-turn.held
		s.scanTurns.leave(workspaceID, turn)
	}, nil
}

// takeSlot sends to slots (a semaphore) once it has room, unless ctx ends
// or timeout fires first (ErrScansBusy).
func takeSlot(ctx context.Context, slots chan struct{}, timeout <-chan time.Time) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return ErrScansBusy
	}
}

// turns grants each name (a workspace, a chain) one holder at a time. A
// name's entry lives while someone holds or waits for it, so the map is
// bounded by the requests in flight.
type turns struct {
	mu    sync.Mutex
	names map[string]*turn
}

type turn struct {
	held chan struct{} // capacity 1: full while held
	refs int           // holders and waiters, under turns.mu
}

// join returns name's turn, counting the caller until leave.
func (t *turns) join(name string) *turn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.names == nil {
		t.names = map[string]*turn{}
	}
	tr := t.names[name]
	if tr == nil {
		tr = &turn{held: make(chan struct{}, 1)}
		t.names[name] = tr
	}
	tr.refs++
	return tr
}

// leave uncounts a caller of join (after it gave the turn back, if it had it).
func (t *turns) leave(name string, tr *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.refs--; tr.refs == 0 {
		delete(t.names, name)
	}
}

// size is how many names have a holder or a waiter.
func (t *turns) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.names)
}
