// Package hangup catches SIGHUP from the first moments of the process, as
// its only import of btk's own: `btk serve` re-reads its files on SIGHUP, and
// a SIGHUP that came while it started (systemctl reload, a certificate
// renewed at boot) killed it, with Go's default action, before its handler
// was set. Caught here, it waits in C until serve reads it; any other
// command calls Release, and then dies of it as before.
//
// This package imports only the standard library's signal handling, so that
// its init runs before the slower ones of the binary's other packages. A
// SIGHUP before the Go runtime itself starts (well under a millisecond
// after exec) still kills the process, as it would any program.
package hangup

import (
	"os"
	"os/signal"
	"syscall"
)

// C receives the SIGHUPs; one waits while nothing reads (more coalesce).
var C = make(chan os.Signal, 1)

func init() { signal.Notify(C, syscall.SIGHUP) }

// Catch catches SIGHUP into C again, after a Release (tests run commands
// in one process); it is a no-op otherwise.
func Catch() { signal.Notify(C, syscall.SIGHUP) }

// Release gives SIGHUP its default action back, for a command that does
// not reload: a hangup ends it, and one that came already ends it now.
func Release() {
	signal.Stop(C)
	select {
	case <-C:
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	default:
	}
}
