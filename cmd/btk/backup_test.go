package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btk-project/btk/internal/store/sqlite"
)

// runProcess runs `btk ARGS` as its own process (the re-executed test
// binary, as for serve) and returns its exit code and output.
func runProcess(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runProcessEnv(t, nil, "", args...)
}

// docs/operating.md#backup-and-restore: a backup taken while btk serve runs and writes is consistent
// (integrity_check), holds every key whose create answered before it began,
// has mode 0600, and btk serve starts on it and serves.
func TestBackupUnderWriteLoad(t *testing.T) {
	parallelUnlessShort(t, "starts btk serve processes")
	dir := t.TempDir()
	db := filepath.Join(dir, "btk.db")
	p := startServe(t, db)
	token := p.login()

	// Writers create keys until told to stop; every answered create is
	// recorded, in the order the answers arrived.
	var (
		mu       sync.Mutex
		answered []procKey
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, err := createKeyVia(client, p.url, token, fmt.Sprintf("load-%d-%d", w, i))
				if err != nil {
					t.Errorf("create during the backup: %v", err)
					return
				}
				mu.Lock()
				answered = append(answered, k)
				mu.Unlock()
			}
		})
	}
	p.WaitFor(t, "some keys to be created", procWait, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= 30
	})
	mu.Lock()
	before := append([]procKey(nil), answered...) // answered before the backup began
	mu.Unlock()
	backup := filepath.Join(dir, "copy.db")
	code, out := runProcess(t, "backup", backup, "--db", db)
	// Let the writers go on a little after the copy, then stop them.
	mu.Lock()
	n := len(answered)
	mu.Unlock()
	p.WaitFor(t, "more keys after the backup", procWait, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= n+5
	})
	close(stop)
	wg.Wait()
	if code != 0 {
		t.Fatalf("btk backup: exit %d\n%s", code, out)
	}

	fi, err := os.Stat(backup)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", fi.Mode().Perm())
	}
	copyDB, err := sql.Open("sqlite", "file:"+(&url.URL{Path: backup}).EscapedPath()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := copyDB.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check of the backup: %q %v", check, err)
	}
	inCopy := map[string]bool{}
	rows, err := copyDB.Query(`SELECT id FROM api_keys`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		inCopy[id] = true
	}
	rows.Close()
	copyDB.Close()
	for _, k := range before {
		if !inCopy[k.ID] {
			t.Errorf("key %s answered before the backup began but is not in it", k.ID)
		}
	}
	t.Logf("%d keys answered before the backup, %d in it, %d answered in all", len(before), len(inCopy), len(answered))
	if err := p.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}

	// The copy serves: a key made before the backup authenticates, the
	// admin logs in.
	restored := startServe(t, backup)
	if s, msg := restored.probe(before[0].Plaintext); s != http.StatusOK {
		t.Errorf("a key from before the backup on the restored server: HTTP %d %q", s, msg)
	}
	restored.login()

	// A second backup to the same file is refused without --force.
	code, out = runProcess(t, "backup", backup, "--db", db)
	if code != exitError || !strings.Contains(out, "exists") || !strings.Contains(out, "--force") {
		t.Errorf("backup onto an existing file: exit %d %q; want 1 and a hint at --force", code, out)
	}
	if code, out := runProcess(t, "backup", "--force", backup, "--db", db); code != 0 {
		t.Errorf("backup --force: exit %d %q", code, out)
	}
}

// createKeyVia creates a key with its own client (safe in a goroutine).
func createKeyVia(client *http.Client, base, token, name string) (procKey, error) {
	body, _ := json.Marshal(map[string]any{
		"query":     `mutation($n:String!){createApiKey(input:{name:$n}){plaintextKey apiKey{id}}}`,
		"variables": map[string]any{"n": name},
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return procKey{}, err
	}
	defer res.Body.Close()
	var out struct {
		Data struct {
			CreateApiKey struct {
				PlaintextKey string
				ApiKey       struct{ ID string }
			}
		}
		Errors []any
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK || len(out.Errors) > 0 {
		return procKey{}, fmt.Errorf("HTTP %d %v %v", res.StatusCode, out.Errors, err)
	}
	return procKey{ID: out.Data.CreateApiKey.ApiKey.ID, Plaintext: out.Data.CreateApiKey.PlaintextKey}, nil
}

// For PostgreSQL the command points to pg_dump, and a missing database is
// an error that creates nothing.
func TestBackupRefusals(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	s, _, errOut := testStreams(pipe, "")
	if code := btkRun(s, "backup", filepath.Join(dir, "x.db"), "--db", "postgres://btk@db.example/btk"); code != exitError || !strings.Contains(errOut.String(), "pg_dump") {
		t.Errorf("backup of a PostgreSQL URL: exit %d %q", code, errOut.String())
	}
	s, _, errOut = testStreams(pipe, "")
	if code := btkRun(s, "backup", filepath.Join(dir, "x.db"), "--db", filepath.Join(dir, "missing.db")); code != exitError {
		t.Errorf("backup of a missing database: exit %d %q", code, errOut.String())
	}
	t.Setenv("BTK_DB", filepath.Join(dir, "from-env.db"))
	s, _, errOut = testStreams(pipe, "")
	btkRun(s, "backup", filepath.Join(dir, "x.db"))
	if !strings.Contains(errOut.String(), "from-env.db") {
		t.Errorf("BTK_DB not used: %q", errOut.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left behind: %v", ents)
	}
	s, _, _ = testStreams(pipe, "")
	if code := btkRun(s, "backup"); code != exitUsage {
		t.Errorf("backup without FILE: exit %d, want %d", code, exitUsage)
	}
}

// docs/design.md#output: success is reported on stdout, without the "btk:" of errors;
// stderr stays empty. With -o json it is a JSON object.
func TestBackupReportsOnStdout(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "btk.db")
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	s, out, errOut := testStreams(pipe, "")
	if code := btkRun(s, "backup", filepath.Join(dir, "copy.db"), "--db", db); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if errOut.Len() != 0 || !strings.HasPrefix(out.String(), "Backed up "+db+" to "+filepath.Join(dir, "copy.db")+" (") {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
	s, out, errOut = testStreams(pipe, "")
	if code := btkRun(s, "backup", filepath.Join(dir, "copy2.db"), "--db", db, "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		File  string `json:"file"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.File != filepath.Join(dir, "copy2.db") || doc.Bytes <= 0 {
		t.Errorf("-o json: %v %q", err, out)
	}
}
