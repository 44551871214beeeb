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
