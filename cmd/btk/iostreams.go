package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

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

	lines *bufio.Reader // In, read line by line for prompts
}

// systemStreams describes the streams btk was started with.
func systemStreams(stdin io.Reader, stdout, stderr io.Writer) *iostreams {
	s := &iostreams{
		In:     stdin,
		Out:    stdout,
		ErrOut: stderr,
		inTTY:  isTerminal(stdin),
		outTTY: isTerminal(stdout),
	}
	s.color = colorEnabled(s.outTTY, os.Getenv)
	if f, ok := stdin.(*os.File); ok && s.inTTY {
		s.readSecret = func() (string, error) {
			b, err := term.ReadPassword(int(f.Fd()))
			return string(b), err
		}
	}
	return s
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

// prompt asks for one line of visible input.
func (s *iostreams) prompt(label string) (string, error) {
	fmt.Fprint(s.ErrOut, label)
	if s.lines == nil {
		s.lines = bufio.NewReader(s.In)
	}
	line, err := s.lines.ReadString('\n')
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
	if err != nil {
		return "", fmt.Errorf("reading password: %w", err)
	}
	return secret, nil
}

// readStdinSecret reads a secret given with --password-stdin: all of
// standard input, less its line ending.
func (s *iostreams) readStdinSecret() (string, error) {
	b, err := io.ReadAll(s.In)
	if err != nil {
		return "", fmt.Errorf("reading standard input: %w", err)
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
