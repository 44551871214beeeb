package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// buildBtk builds this package into dir with extra go build flags.
func buildBtk(t *testing.T, flags ...string) string {
	t.Helper()
	if raceEnabled {
		// A go build of its own, with nothing concurrent to check: the run
		// without -race covers it at half the cost of CI.
		t.Skip("builds btk; run without -race")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "btk")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append(append([]string{"build", "-o", bin}, flags...), ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	return bin
}

func btkOutput(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		t.Fatalf("btk %v: %v", args, err)
	}
	return string(out)
}

func decodeVersion(t *testing.T, s string) versionInfo {
	t.Helper()
	var v versionInfo
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("btk version -o json: %v\n%s", err, s)
	}
	return v
}

// Without ldflags or VCS information (a test binary), btk version says what
// it knows and "dev" / "unknown" for the rest, in each output format.
func TestVersionFallback(t *testing.T) {
	isolate(t)
	s, out, _ := testStreams(pipe, "")
	if code := btkRun(s, "version", "-o", "json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	v := decodeVersion(t, out.String())
	if v.GoVersion != runtime.Version() || v.Version == "" || v.Commit == "" || v.Date == "" {
		t.Errorf("version -o json: %+v", v)
	}
	s, out, _ = testStreams(pipe, "")
	btkRun(s, "version")
	for _, label := range []string{"Version:", "Commit:", "Built:", "Go:", runtime.Version()} {
		if !strings.Contains(out.String(), label) {
			t.Errorf("btk version lacks %q:\n%s", label, out)
		}
	}
	s, out, _ = testStreams(pipe, "")
	btkRun(s, "version", "-o", "plain")
	if out.String() != v.Version+"\n" {
		t.Errorf("version -o plain = %q, want %q", out, v.Version+"\n")
	}
}

// The release build: version, commit and date come from the ldflags that
// .goreleaser.yaml sets.
func TestVersionLdflags(t *testing.T) {
	parallelUnlessShort(t, "builds btk")
	bin := buildBtk(t, "-buildvcs=false", "-ldflags",
		"-X main.version=v1.2.3 -X main.commit=0123456789abcdef -X main.date=2026-01-02T03:04:05Z")
	v := decodeVersion(t, btkOutput(t, bin, "version", "-o", "json"))
	want := versionInfo{Version: "v1.2.3", Commit: "0123456789abcdef", Date: "2026-01-02T03:04:05Z", GoVersion: runtime.Version()}
	if v != want {
		t.Errorf("version -o json = %+v, want %+v", v, want)
	}
	if got := btkOutput(t, bin, "--version"); got != "btk v1.2.3\n" {
		t.Errorf("btk --version = %q", got)
	}
	if got := btkOutput(t, bin, "version"); !strings.Contains(got, "v1.2.3") || !strings.Contains(got, "0123456789abcdef") ||
		!strings.Contains(got, "2026-01-02T03:04:05Z") {
		t.Errorf("btk version:\n%s", got)
	}
}

// Without ldflags, the figures come from the build info: the module version
// of `go install …@v1.4.0`, the VCS settings of a build in a checkout.
func TestVersionFromBuildInfo(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/btk-project/btk", Version: "v1.4.0"}}
	if v := versionFrom(installed, true); v.Version != "v1.4.0" || v.Commit != "unknown" || v.Date != "unknown" {
		t.Errorf("go install …@v1.4.0: %+v", v)
	}
	checkout := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "4f1e2d"}, {Key: "vcs.time", Value: "2026-11-20T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if v := versionFrom(checkout, true); v.Version != "dev" || v.Commit != "4f1e2d" || v.Date != "2026-11-20T10:00:00Z" || !v.Modified {
		t.Errorf("a build in a modified checkout: %+v", v)
	}
	if v := versionFrom(nil, false); v.Version != "dev" || v.Commit != "unknown" || v.GoVersion != runtime.Version() {
		t.Errorf("no build info: %+v", v)
	}
}

// Built in a git checkout without ldflags, btk version reads the build
// info: the commit, its time, and the version Go derives from them.
func TestVersionBuildInfo(t *testing.T) {
	parallelUnlessShort(t, "builds btk")
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	head, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	top, _ := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		// cmd/go looks for a .git directory; a worktree has a .git file.
		t.Skip("a git worktree: the go command stamps VCS information only in a checkout with a .git directory")
	}
	commit := strings.TrimSpace(string(head))
	bin := buildBtk(t, "-buildvcs=true")
	v := decodeVersion(t, btkOutput(t, bin, "version", "-o", "json"))
	if v.Commit != commit {
		t.Errorf("commit = %q, want HEAD %q", v.Commit, commit)
	}
	if _, err := time.Parse(time.RFC3339, v.Date); err != nil {
		t.Errorf("date = %q, want the commit time: %v", v.Date, err)
	}
	// Go 1.24+ derives a pseudo-version (or the tag) from the checkout.
	if v.Version == "dev" || !strings.Contains(v.Version, commit[:12]) && !strings.HasPrefix(v.Version, "v") {
		t.Errorf("version = %q, want one derived from commit %s", v.Version, commit[:12])
	}
	if v.GoVersion != runtime.Version() {
		t.Errorf("goVersion = %q", v.GoVersion)
	}
}
