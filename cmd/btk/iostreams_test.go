package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// readRawLine is the raw-mode password reader: Enter ends a line, Ctrl-C
// interrupts, backspace and Ctrl-U edit, a CRLF's LF does not end the next.
func TestReadRawLine(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"secret\r", "secret", nil},
		{"secret\n", "secret", nil},
		{"\nsecret\r", "secret", nil},
		{"secx\x7fret\r", "secret", nil},
		{"wrong\x15secret\r", "secret", nil},
		{"pässw\x7f\x7fsword\r", "pässword", nil},
		{"sec\x03ret\r", "", errInterrupted},
		{"\x04", "", io.EOF},
	} {
		got, err := readRawLine(strings.NewReader(tc.in))
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("readRawLine(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// Prompts are broken between words, never inside one, to fit the terminal.
func TestWrapWords(t *testing.T) {
	prompt := `Revoke key "deploy-production" (btk_1a2b3c4d_….wxyz)? Requests with it will fail at once; this cannot be undone. [y/N] `
	got := wrapWords(prompt, 80)
	if strings.ReplaceAll(got, "\n", " ") != prompt {
		t.Fatalf("words changed: %q", got)
	}
	for _, line := range strings.Split(got, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("line of %d cells: %q", n, line)
		}
	}
	if !strings.HasSuffix(got, "[y/N] ") || !strings.Contains(got, "\n") {
		t.Errorf("wrapped: %q", got)
	}
	if got := wrapWords("Email: ", 80); got != "Email: " {
		t.Errorf("short prompt changed: %q", got)
	}
	if got := wrapWords("a-very-long-word b", 5); got != "a-very-long-word\nb" {
		t.Errorf("long word: %q", got)
	}
}
