// Package testproc runs the external programs of tests (btk serve, nginx,
// caddy, redis-server, redis-sentinel) on free ports of 127.0.0.1 and ends
// them when the test ends. Every wait is bounded, so a program that hangs
// or dies fails its test with its output instead of stalling the run.
package testproc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Grace bounds how long a program may take to exit once signalled before it
// is killed, and how long Wait waits for its output after it has exited.
const Grace = 10 * time.Second

// T is what the package needs of a test: *testing.T and *testing.B, or an
// adapter (a testscript script's Defer as Cleanup).
type T interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Need returns the path of program, or skips the test naming it and the
// Debian package that installs it.
func Need(t testing.TB, program, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		t.Skipf("%s not found on PATH: install the Debian package %s (apt-get install -y %s)", program, pkg, pkg)
	}
	return p
}

// FreeAddr returns a 127.0.0.1 address (host:port) free at the moment.
func FreeAddr(t T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is the port of FreeAddr.
func FreePort(t T) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	return port
}

// Buffer collects a program's output: written by the process's copier while
// the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Process is a program a test started.
type Process struct {
	Cmd *exec.Cmd
	// Out holds what the program wrote, when Start gave it its stdout and
	// stderr.
	Out *Buffer
	// LogFiles are files the program writes its log to: failures quote them.
	LogFiles []string

	exited chan struct{}
	err    error // set before exited is closed
}

// Start starts cmd (its stdout and stderr go to Out unless set) and ends it
// when the test ends: with the signal end (os.Interrupt for a graceful stop,
// os.Kill to kill it at once), then SIGKILL after Grace.
func Start(t T, cmd *exec.Cmd, end os.Signal) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, Out: &Buffer{}, exited: make(chan struct{})}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		cmd.Stdout, cmd.Stderr = p.Out, p.Out
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = Grace // Wait returns even if a child of the program keeps the output open
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.End(end) })
	return p
}

// Exited is closed once the program has exited; Err is then its exit error.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the exit error (nil for status 0), once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// End sends sig unless the program has exited, and waits until it has,
// killing it if it is still there after Grace.
func (p *Process) End(sig os.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(sig) // fails only once it has exited: waited for below
	select {
	case <-p.exited:
	case <-time.After(Grace):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Output is what the program wrote: Out, then each of LogFiles.
func (p *Process) Output() string {
	s := p.Out.String()
	for _, f := range p.LogFiles {
		b, _ := os.ReadFile(f) // #nosec G304 -- a log file the test named for its own program
		s += "\n" + f + ":\n" + string(b)
	}
	return s
}

// WaitFor polls ready every 20 ms until it is true, failing the test at once
// if the program exits, or after bound; what names the awaited event in the
// failure ("127.0.0.1:8080 to accept connections").
func (p *Process) WaitFor(t T, what string, bound time.Duration, ready func() bool) {
	t.Helper()
	deadline := time.After(bound)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-p.exited:
			t.Fatalf("%s exited while waiting for %s: %v\n%s", p.name(), what, p.err, p.Output())
		case <-deadline:
			t.Fatalf("%s: waited %v for %s:\n%s", p.name(), bound, what, p.Output())
		case <-tick.C:
		}
	}
}

// WaitListening waits (15 s at most) until addr accepts TCP connections.
func (p *Process) WaitListening(t T, addr string) {
	t.Helper()
	p.WaitFor(t, addr+" to accept connections", 15*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

func (p *Process) name() string { return filepath.Base(p.Cmd.Path) }

// Nginx runs nginx (bin, from Need) with site, an http-level config that
// listens on addr, inside a wrapper that keeps nginx in the foreground as
// one process with every path under dir, until the test ends; it returns
// once addr accepts connections.
func Nginx(t T, bin, dir, site, addr string) *Process {
	t.Helper()
	wrapper := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/site.conf;
}
`, dir)
	conf := filepath.Join(dir, "nginx.conf")
	for name, text := range map[string]string{"site.conf": site, "nginx.conf": wrapper} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatalf("%v", err)
		}
	}
	errorLog := filepath.Join(dir, "error.log")
	p := Start(t, exec.Command(bin, "-p", dir, "-c", conf, "-e", errorLog), os.Interrupt) // #nosec G204 -- test support: the nginx found on PATH, on the test's own config
	p.LogFiles = []string{errorLog}
	p.WaitListening(t, addr)
	return p
}
