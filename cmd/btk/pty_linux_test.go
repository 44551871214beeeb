package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

func init() { scriptCmds["ptyexec"] = cmdPtyexec }

// openPty opens a pseudo-terminal pair with the given width.
func openPty(cols int) (master, tty *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: uint16(cols)}); err != nil {
		master.Close()
		tty.Close()
		return nil, nil, err
	}
	return master, tty, nil
}

// ptyexec [-cols N] [-exit N] DIALOGUE prog [args...]: run prog with its
// standard input, output and error on a terminal N columns wide (default
// 80), as the session leader with that terminal as its controlling terminal,
// so that a ^C typed is a SIGINT as in a shell. DIALOGUE is a file of lines
// "expect REGEX" (wait, at most 10 s, for the output to match) and
// "send TEXT" (type TEXT, a Go string body: \n, \x03 for Ctrl-C). The process
// must then exit within 10 s with status N (default 0). stdout gets the
// terminal transcript (carriage returns and escape codes removed), then
// "[ptyexec: echo on|off, widest line W]" telling the terminal's echo mode
// after the exit and the widest line of output.
func cmdPtyexec(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! ptyexec")
	}
	cols, want := 80, 0
	for len(args) > 1 && strings.HasPrefix(args[0], "-") {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		switch args[0] {
		case "-cols":
			cols = n
		case "-exit":
			want = n
		default:
			ts.Fatalf("ptyexec: unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		ts.Fatalf("usage: ptyexec [-cols N] [-exit N] DIALOGUE prog [args...]")
	}
	dialogue := ts.ReadFile(args[0])
	bin, err := exec.LookPath(args[1])
	ts.Check(err)

	master, tty, err := openPty(cols)
	ts.Check(err)
	defer master.Close()
	defer tty.Close()

	cmd := exec.Command(bin, args[2:]...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TERM=xterm", "GOCOVERDIR=" + os.Getenv("GOCOVERDIR")}
	for _, name := range []string{"HOME", "XDG_CONFIG_HOME", "BTK_SERVER", "BTK_TOKEN", "BTK_CONFIG", "NO_COLOR", "TMPDIR"} {
		if v := ts.Getenv(name); v != "" {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	ts.Check(cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var mu sync.Mutex
	var out strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	transcript := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	fail := func(format string, args ...any) {
		cmd.Process.Kill()
		ts.Fatalf("ptyexec: "+format+"\ntranscript:\n%s", append(args, transcript())...)
	}

	from := 0 // expect matches output after the previous match
	for _, line := range strings.Split(dialogue, "\n") {
		verb, arg, _ := strings.Cut(line, " ")
		switch verb {
		case "", "#":
		case "expect":
			re, err := regexp.Compile(arg)
			ts.Check(err)
			deadline := time.Now().Add(10 * time.Second)
			for {
				t := transcript()
				if loc := re.FindStringIndex(t[from:]); loc != nil {
					from += loc[1]
					break
				}
				if time.Now().After(deadline) {
					fail("no match for %q", arg)
				}
				time.Sleep(10 * time.Millisecond)
			}
		case "send":
			text, err := strconv.Unquote(`"` + arg + `"`)
			ts.Check(err)
			_, err = master.Write([]byte(text))
			ts.Check(err)
		default:
			ts.Fatalf("ptyexec: unknown dialogue line %q", line)
		}
	}
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(10 * time.Second):
		fail("the process did not exit within 10 s")
	}
	got := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		got = ee.ExitCode()
	} else if werr != nil {
		ts.Fatalf("ptyexec: %v", werr)
	}
	termios, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	ts.Check(err)
	echo := "off"
	if termios.Lflag&unix.ECHO != 0 {
		echo = "on"
	}
	time.Sleep(50 * time.Millisecond) // let the reader drain the last output
	text := strings.ReplaceAll(ansi.Strip(transcript()), "\r", "")
	widest := 0
	for _, l := range strings.Split(text, "\n") {
		widest = max(widest, ansi.StringWidth(l))
	}
	fmt.Fprintf(ts.Stdout(), "%s\n[ptyexec: echo %s, widest line %d]\n", text, echo, widest)
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d\ntranscript:\n%s", args[1], got, want, text)
	}
}
