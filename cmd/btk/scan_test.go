package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/leaktest"
)

// heapProbe is standard output that measures the live heap every 10,000
// lines written: btk scan prints as it finds, so this samples memory while
// the scan runs.
type heapProbe struct {
	lines, peak uint64
}

func (h *heapProbe) Write(p []byte) (int, error) {
	for range bytes.Count(p, []byte("\n")) {
		if h.lines++; h.lines%10_000 == 0 {
			h.peak = max(h.peak, liveHeap())
		}
	}
	return len(p), nil
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// btk scan's memory does not grow with the keys it finds
// (docs/leaks.md#how-fast-btk-scan-is): 200,000 different keys in a few
// files are printed as found, and the live heap meanwhile stays within the
// readers' chunks and a few MB of what it was. Holding every place, as btk
// scan did, took about 235 MB of RSS for these.
func TestScanMemoryBounded(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	const files, perFile = 4, 50_000
	for i := range files {
		var b bytes.Buffer
		for range perFile {
			k, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
			b.WriteString("2026-11-24T04:21:30Z GET /orders api_key=" + k + " 200\n")
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i, ".log")), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, format := range []string{"table", "json"} {
		s, _, errOut := testStreams(pipe, "")
		probe := &heapProbe{}
		s.Out = probe
		before := liveHeap()
		if code := btkRun(s, "scan", dir, "-o", format); code != exitKeysFound {
			t.Fatalf("-o %s: exit %d; want 9 (%s)", format, code, errOut)
		}
		if min := uint64(files * perFile); probe.lines < min {
			t.Fatalf("-o %s: %d lines; want at least %d", format, probe.lines, min)
		}
		if !strings.Contains(errOut.String(), "found more than 10000 different API keys in 200000 place(s)") {
			t.Errorf("-o %s: %s", format, errOut)
		}
		// The readers' 256 KiB chunks (two per CPU), the 10,000 hashes
		// remembered, the queue to the output, and slack.
		bound := uint64(2*runtime.GOMAXPROCS(0)*256<<10 + 8<<20)
		if probe.peak > before && probe.peak-before > bound {
			t.Errorf("-o %s: the live heap grew by %d bytes during the scan; want at most %d", format, probe.peak-before, bound)
		}
	}
}

// With --check, at most maxScanKeys different keys are asked about; the
// places of the others are UNCHECKED, reported even when marked btk:allow,
// and the scan exits 9 (docs/leaks.md).
func TestScanCheckCapsTheKeysAsked(t *testing.T) {
	ls := newLeakServer(t)
	defer func(n int) { maxScanKeys = n }(maxScanKeys)
	maxScanKeys = 2
	revoked := ls.createKey(t, "revoked", false)
	if _, err := ls.svc.RevokeKey(context.Background(), ls.owner, revoked.Key.ID); err != nil {
		t.Fatal(err)
	}
	stranger, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
	late := ls.createKey(t, "late", false)
	dir := t.TempDir()
	text := revoked.Plaintext + "\n" + stranger + "\n" + revoked.Plaintext + "\n" + late.Plaintext + " # btk:allow\n"
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "scan", dir, "--check"); code != exitKeysFound {
		t.Fatalf("exit %d; want 9 (%s)", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"1:1: .*REVOKED  revoked", "2:1: .*UNKNOWN", "3:1: .*REVOKED  revoked", "4:1: .*UNCHECKED"}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d: %q; want %q", i+1, lines[i], w)
		}
	}
	if !strings.Contains(errOut.String(), "1 place(s) hold keys past the first 2 different ones, not checked (UNCHECKED)") {
		t.Errorf("stderr: %s", errOut)
	}
	if ls.received(t, leaktest.Hash(late.Plaintext)) {
		t.Error("a key past the cap was asked about")
	}
}

// On a terminal, --revoke prints every place, then asks once, then revokes;
// declined, nothing is revoked (exit 1).
func TestScanRevokeAsksAfterTheScan(t *testing.T) {
	ls := newLeakServer(t)
	t.Setenv("NO_COLOR", "1")
	k := ls.createKey(t, "live", false)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.env"), []byte("KEY="+k.Plaintext+"\nAGAIN="+k.Plaintext+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, out, errOut := testStreams(fakeTerminal, "n\n")
	if code := btkRun(s, "scan", dir, "--revoke"); code != exitError || strings.Count(out.String(), "ACTIVE  live") != 2 ||
		!strings.Contains(errOut.String(), `Revoke 1 active key(s): "live"`) {
		t.Fatalf("declined: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), k.Plaintext); err != nil {
		t.Fatalf("declined, yet the key is refused: %v", err)
	}
	s, out, errOut = testStreams(fakeTerminal, "y\n")
	if code := btkRun(s, "scan", dir, "--revoke"); code != exitKeysFound || !strings.Contains(errOut.String(), `Revoked key "live"`) {
		t.Fatalf("confirmed: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, err := ls.svc.AuthenticateKey(context.Background(), k.Plaintext); err != btk.ErrKeyRevokedOrExpired {
		t.Errorf("after --revoke: %v", err)
	}
}

// A file in UTF-16 with a byte order mark (PowerShell's Out-File) is
// scanned as the text it holds, with that text's lines and columns.
func TestScanUTF16(t *testing.T) {
	isolate(t)
	k, _, _, _ := btk.NewKey("3f2a9c1e-0000-4000-8000-000000000000")
	dir := t.TempDir()
	for name, order := range map[string]binary.AppendByteOrder{"le.txt": binary.LittleEndian, "be.txt": binary.BigEndian} {
		data := order.AppendUint16(nil, 0xFEFF)
		for _, u := range utf16.Encode([]rune("Name  Value\r\n----  -----\r\nKEY   " + k + "\r\n")) {
			data = order.AppendUint16(data, u)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "scan", dir); code != exitKeysFound {
		t.Fatalf("exit %d; want 9 (%s)", code, errOut)
	}
	shown := k[:12] + "_…" + k[52:]
	want := filepath.Join(dir, "be.txt") + ":3:7: " + shown + "\n" + filepath.Join(dir, "le.txt") + ":3:7: " + shown + "\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}
