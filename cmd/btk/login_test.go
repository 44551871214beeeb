package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// login warns before a password goes over plain HTTP to another machine.
func TestPlainHTTPElsewhere(t *testing.T) {
	for server, want := range map[string]bool{
		"http://127.0.0.1:8080":        false,
		"http://[::1]:8080":            false,
		"http://localhost:8080":        false,
		"http://btk.localhost":         false,
		"https://btk.example.com":      false,
		"http://btk.example.com":       true,
		"http://10.0.0.5:8080":         true,
		"http://u:p@btk.internal:8080": true,
	} {
		if got := plainHTTPElsewhere(server); got != want {
			t.Errorf("plainHTTPElsewhere(%q) = %v, want %v", server, got, want)
		}
	}
}

// endlessInput is n bytes of 'a' on standard input, counting what is read.
type endlessInput struct{ left, read int }

func (e *endlessInput) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), e.left)
	for i := range n {
		p[i] = 'a'
	}
	e.left -= n
	e.read += n
	return n, nil
}

// --password-stdin reads at most 64 KiB and one byte: more is a usage error
// (exit 2), and login says so before it connects. 100 MB piped in took
// 558 MB before the server refused it.
func TestPasswordStdinBounded(t *testing.T) {
	var hits atomic.Int32
	quiet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer quiet.Close()
	isolate(t)
	in := &endlessInput{left: 100 << 20}
	s, _, errOut := testStreams(pipe, "")
	s.In = in
	if code := btkRun(s, "login", "--server", quiet.URL, "--email", "a@example.com", "--password-stdin"); code != exitUsage ||
		!strings.Contains(errOut.String(), "--password-stdin: standard input is longer than 64 KiB") {
		t.Fatalf("login: exit %d; want 2 (%s)", code, errOut)
	}
	if hits.Load() != 0 || in.read > maxSecretInput+1 {
		t.Errorf("login: %d requests, %d bytes read; want none and at most %d", hits.Load(), in.read, maxSecretInput+1)
	}
	// The other commands that take --password-stdin, connected to a server
	// that answers nothing they ask (every operation fails the test).
	loggedInTo(t, newFakeServer(t, nil))
	for _, args := range [][]string{
		{"elevate", "--password-stdin"},
		{"password", "--password-stdin"},
		{"account", "create", "b@example.com", "--password-stdin"},
	} {
		in := &endlessInput{left: 100 << 20}
		s, _, errOut := testStreams(pipe, "")
		s.In = in
		if code := btkRun(s, args...); code != exitUsage || !strings.Contains(errOut.String(), "longer than 64 KiB") || in.read > maxSecretInput+1 {
			t.Errorf("%s: exit %d after %d bytes; want 2 after at most %d (%s)", args, code, in.read, maxSecretInput+1, errOut)
		}
	}
	// 64 KiB is still read whole.
	s, _, _ = testStreams(pipe, "")
	s.In = &endlessInput{left: maxSecretInput}
	if pw, err := s.readStdinSecret(); err != nil || len(pw) != maxSecretInput {
		t.Errorf("64 KiB: %d bytes, %v", len(pw), err)
	}
}

// A line typed at a prompt is bounded as well: 64 KiB is refused, not held.
func TestPromptLineBounded(t *testing.T) {
	long := strings.Repeat("a", maxSecretInput+1)
	if _, err := readRawLine(strings.NewReader(long + "\r")); err != errLineTooLong {
		t.Errorf("raw line of 64 KiB + 1: %v", err)
	}
	if got, err := readRawLine(strings.NewReader(long[1:] + "\r")); err != nil || len(got) != maxSecretInput {
		t.Errorf("raw line of 64 KiB: %d bytes, %v", len(got), err)
	}
	s, _, _ := testStreams(fakeTerminal, long+"\n")
	if _, err := s.prompt("Email: "); !errors.Is(err, errLineTooLong) {
		t.Errorf("prompt answered 64 KiB + 1: %v", err)
	}
	s, _, _ = testStreams(fakeTerminal, long[1:]+"\r\n")
	if got, err := s.prompt("Email: "); err != nil || len(got) != maxSecretInput {
		t.Errorf("prompt answered 64 KiB: %d bytes, %v", len(got), err)
	}
}
