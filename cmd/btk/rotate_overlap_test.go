package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSuccessorName(t *testing.T) {
	long := strings.Repeat("é", 64)
	for _, c := range []struct {
		name  string
		taken []string
		want  string
	}{
		{"deploy", nil, "deploy-2"},
		{"deploy", []string{"deploy-2", "deploy-3"}, "deploy-4"},
		{"deploy-2", nil, "deploy-3"},
		{"deploy-9", []string{"deploy-10"}, "deploy-11"},
		{"deploy-1", nil, "deploy-1-2"},         // -1 is no generation an overlap makes
		{"backend-2027", nil, "backend-2027-2"}, // a year is not a generation
		{"-5", nil, "-5-2"},
		{long, nil, strings.Repeat("é", 62) + "-2"},
	} {
		taken := map[string]bool{}
		for _, n := range c.taken {
			taken[n] = true
		}
		got := successorName(c.name, func(n string) bool { return taken[n] })
		if c.want != "" && got != c.want {
			t.Errorf("successorName(%q) = %q, want %q", c.name, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > 64 || taken[got] || got == c.name {
			t.Errorf("successorName(%q) = %q (%d characters)", c.name, got, n)
		}
	}
}
