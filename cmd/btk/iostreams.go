package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/charmbracelet/x/ansi"
	"golang.org/x/term"
)

// iostreams are the standard streams of one btk invocation and what is known
// about them. Data goes to Out, prompts, notices and errors to ErrOut. Tests
// build them with fake terminals.
type iostreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	inTTY  bool // standard input is a terminal: btk may prompt
	outTTY bool // standard output is a terminal: human output, relative times
	color  bool // colour on standard output

	// readSecret reads one line from the terminal without echoing it.
	readSecret func() (string, error)
	// width is the terminal's width in columns when stdout is a terminal,
	// 0 otherwise (no truncation).
	width func() int
	// errWidth is the width of standard error when it is a terminal, nil
	// otherwise: prompts are wrapped between words to fit it.
	errWidth func() int

	// done is closed on Ctrl-C (SIGINT) or SIGTERM: a prompt gives up at
	// once rather than wait for Enter. nil never closes.
	done <-chan struct{}

	lines *bufio.Reader // In, read line by line for prompts
}

// errInterrupted is a prompt given up on Ctrl-C: exit status 130, as a
// shell reports a process killed by SIGINT.
var errInterrupted = errors.New("interrupted")

// systemStreams describes the streams btk was started with.
func systemStreams(stdin io.Reader, stdout, stderr io.Writer) *iostreams {
	s := &iostreams{
		In:     stdin,
		Out:    &outWriter{w: stdout},
		ErrOut: stderr,
		inTTY:  isTerminal(stdin),
		outTTY: isTerminal(stdout),
	}
	s.color = colorEnabled(s.outTTY, os.Getenv)
	if f, ok := stdin.(*os.File); ok && s.inTTY {
		s.readSecret = func() (string, error) { return s.readRawSecret(f) }
	}
	if f, ok := stdout.(*os.File); ok && s.outTTY {
		s.width = func() int { return terminalWidth(int(f.Fd()), os.Getenv) }
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(stderr) {
		s.errWidth = func() int { return terminalWidth(int(f.Fd()), os.Getenv) }
	}
	return s
}

// terminalWidth is the width of the terminal fd, else $COLUMNS, else 80.
func terminalWidth(fd int, getenv func(string) string) int {
	if w, _, err := term.GetSize(fd); err == nil && w > 0 {
		return w
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// outWriter is standard output, remembering its first failed write: data
// that did not reach a full disk or a closed descriptor must not exit 0
// (docs/design.md#exit-codes). A broken pipe never gets here: Go ends the
// process with SIGPIPE, as other Unix tools end.
type outWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (o *outWriter) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	o.err = err
	return n, err
}

// outErr is the first error writing standard output, if any.
func (s *iostreams) outErr() error {
	o, ok := s.Out.(*outWriter)
	if !ok {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return fmt.Errorf("writing standard output: %w", o.err)
	}
	return nil
}

// outWidth is the width tables must fit in: 0 (any) unless stdout is a terminal.
func (s *iostreams) outWidth() int {
	if s.width == nil || !s.outTTY {
		return 0
	}
	return s.width()
}

// wait returns read's result, or errInterrupted as soon as done closes;
// read then goes on in the background, and the process exits.
func (s *iostreams) wait(read func() (string, error)) (string, error) {
	type result struct {
		v   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := read()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-s.done:
		return "", errInterrupted
	}
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// colorEnabled: colour only on a terminal, never with NO_COLOR
// (https://no-color.org) or on a dumb terminal.
func colorEnabled(tty bool, getenv func(string) string) bool {
	return tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// canPrompt reports whether btk may ask the user something.
func (s *iostreams) canPrompt() bool { return s.inTTY }

// confirmable fails, before anything is done, when a command that asks for
// confirmation has nobody to ask and --yes (yes) was not given; action says
// what was refused ("revoke").
func (s *iostreams) confirmable(yes bool, action string) error {
	if yes || s.canPrompt() {
		return nil
	}
	return usageErrorf("refusing to %s without confirmation: pass --yes (there is no terminal to ask)", action)
}

// confirm asks question, to be answered y or yes; any other answer fails
// with "not confirmed: " and notDone (what was therefore not done).
func (s *iostreams) confirm(question, notDone string) error {
	answer, err := s.prompt(question + " [y/N] ")
	if err != nil {
		return err
	}
	if a := strings.ToLower(answer); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed: %s", notDone)
	}
	return nil
}

// prompt asks for one line of visible input.
func (s *iostreams) prompt(label string) (string, error) {
	if s.errWidth != nil {
		label = wrapWords(label, s.errWidth())
	}
	fmt.Fprint(s.ErrOut, label)
	if s.lines == nil {
		s.lines = bufio.NewReader(s.In)
	}
	line, err := s.wait(func() (string, error) { return readLine(s.lines) })
	if errors.Is(err, errInterrupted) {
		fmt.Fprintln(s.ErrOut)
		return "", err
	}
	if err != nil && (err != io.EOF || line == "") {
		return "", fmt.Errorf("reading answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// promptSecret asks for one line of input without echoing it.
func (s *iostreams) promptSecret(label string) (string, error) {
	if s.readSecret == nil {
		return "", usageErrorf("cannot read a password without a terminal")
	}
	fmt.Fprint(s.ErrOut, label)
	secret, err := s.readSecret()
	fmt.Fprintln(s.ErrOut)
	if errors.Is(err, errInterrupted) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("reading password: %w", err)
	}
	return secret, nil
}

// maxSecretInput bounds a password read from standard input, and any line
// typed at a prompt: the server takes no request larger than 64 KiB
// (docs/security.md#bounds-on-a-request), so no password it accepts is
// longer, and 100 MB piped in is refused, not held.
const maxSecretInput = 64 << 10

// errLineTooLong refuses a line typed at a prompt longer than maxSecretInput.
var errLineTooLong = usageErrorf("the line typed is longer than 64 KiB")

// readStdinSecret reads a secret given with --password-stdin: all of
// standard input, less its line ending, up to maxSecretInput bytes; more is
// a usage error.
func (s *iostreams) readStdinSecret() (string, error) {
	b, err := io.ReadAll(io.LimitReader(s.In, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("reading standard input: %w", err)
	}
	if len(b) > maxSecretInput {
		return "", usageErrorf("--password-stdin: standard input is longer than 64 KiB: give the password alone")
	}
	secret := strings.TrimRight(string(b), "\r\n")
	if secret == "" {
		return "", usageErrorf("--password-stdin: standard input is empty")
	}
	return secret, nil
}

// password returns a password from standard input (--password-stdin) or a
// prompt; without either it fails at once with a usage error rather than
// waiting on a standard input nobody writes to.
func (s *iostreams) password(fromStdin bool, label string) (string, error) {
	switch {
	case fromStdin:
		return s.readStdinSecret()
	case s.canPrompt():
		pw, err := s.promptSecret(label)
		if err == nil && pw == "" {
			err = usageErrorf("empty password")
		}
		return pw, err
	default:
		return "", usageErrorf("no terminal to ask for the password: pass it on standard input with --password-stdin")
	}
}

// newPassword reads a password being set: from standard input with
// --password-stdin (fromStdin), else asked for on a terminal with label and
// again with repeat, and refused when the two differ.
func (s *iostreams) newPassword(fromStdin bool, label, repeat string) (string, error) {
	pw, err := s.password(fromStdin, label)
	if err != nil || fromStdin {
		return pw, err
	}
	again, err := s.promptSecret(repeat)
	if err != nil {
		return "", err
	}
	if again != pw {
		return "", usageErrorf("the passwords do not match")
	}
	return pw, nil
}

// readRawSecret reads a line from the terminal f in raw mode, so that
// nothing is echoed and Ctrl-C arrives as a byte, not a signal: it answers
// errInterrupted at once, with the terminal restored first. The terminal
// goes raw before the reading goroutine starts, so a SIGTERM (done) can
// restore it without racing a change of mode still to come.
func (s *iostreams) readRawSecret(f *os.File) (string, error) {
	fd := int(f.Fd())
	st, err := term.MakeRaw(fd)
	if err != nil {
		return "", err
	}
	defer term.Restore(fd, st)
	return s.wait(func() (string, error) { return readRawLine(f) })
}

// readRawLine reads bytes up to Enter, with backspace and Ctrl-U editing;
// Ctrl-C is errInterrupted, Ctrl-D on an empty line io.EOF, a line longer
// than maxSecretInput errLineTooLong.
func readRawLine(r io.Reader) (string, error) {
	var line []byte
	var b [1]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			return "", err
		}
		switch c := b[0]; c {
		case '\n':
			if len(line) == 0 {
				continue // the rest of a CRLF that ended the previous line
			}
			return string(line), nil
		case '\r':
			return string(line), nil
		case 3: // Ctrl-C
			return "", errInterrupted
		case 4: // Ctrl-D
			if len(line) == 0 {
				return "", io.EOF
			}
		case 21: // Ctrl-U
			line = line[:0]
		case 8, 127: // backspace
			if len(line) > 0 {
				// Drop a whole UTF-8 sequence.
				i := len(line) - 1
				for i > 0 && line[i]&0xC0 == 0x80 {
					i--
				}
				line = line[:i]
			}
		default:
			if len(line) == maxSecretInput {
				return "", errLineTooLong
			}
			line = append(line, c)
		}
	}
}

// readLine reads one line of r, line ending included, of at most
// maxSecretInput bytes: a longer one is errLineTooLong, not held.
func readLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		if len(line)+len(part) > maxSecretInput+2 { // and its CR LF
			return "", errLineTooLong
		}
		line = append(line, part...)
		if err != bufio.ErrBufferFull {
			if len(bytes.TrimRight(line, "\r\n")) > maxSecretInput {
				return "", errLineTooLong
			}
			return string(line), err
		}
	}
}

// wrapWords breaks each line of text between words so that none is wider
// than width cells (a word wider than that stays whole, on its own line),
// rather than let the terminal break it mid-word. A trailing blank (where a
// prompt's answer goes) is kept, and counted.
func wrapWords(text string, width int) string {
	if width <= 0 {
		return text
	}
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		words := strings.Split(line, " ")
		var b strings.Builder
		col := 0
		for j, word := range words {
			w := ansi.StringWidth(word)
			if j > 0 {
				if col+1+w > width {
					b.WriteByte('\n')
					col = 0
				} else {
					b.WriteByte(' ')
					col++
				}
			}
			b.WriteString(word)
			col += w
		}
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}
