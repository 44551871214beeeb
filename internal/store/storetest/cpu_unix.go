//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time so far (benchmarks
// report it per operation: on a shared machine it varies less than the
// wall time).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
