package main

import "testing"

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
