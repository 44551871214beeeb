package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// docs/operating.md#settings-of-btk-serve: under --log-format json every line btk serve logs is JSON,
// go-redis's own messages included (a Redis that does not answer at start);
// only the final error line is for people.
func TestServeRedisMessagesAreJSON(t *testing.T) {
	parallelUnlessShort(t, "starts a btk serve process")
	p := launchServe(t, t.TempDir()+"/btk.db", "--log-format", "json", "--redis", "redis://127.0.0.1:1/0")
	select {
	case <-p.Exited():
	case <-time.After(procWait):
		t.Fatal("btk serve did not exit")
	}
	out := strings.TrimSpace(p.Out.String())
	lines := strings.Split(out, "\n")
	sawRedis := false
	for _, line := range lines[:len(lines)-1] {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "redis: ") {
			sawRedis = true
		}
	}
	if !sawRedis {
		t.Errorf("go-redis's message did not reach the log:\n%s", out)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "btk: --redis") {
		t.Errorf("last line %q, want the error", last)
	}
}
