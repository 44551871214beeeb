package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/btk-project/btk/internal/testproc"
)

// The scripts in testdata/script drive the real btk binary code (main) as
// the command "btk", against a real `btk serve` started by the serve command.

const (
	scriptAdminEmail    = "admin@example.com"
	scriptAdminPassword = "correct-horse-battery-staple"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"btk": main})
}

func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("XDG_CONFIG_HOME", env.WorkDir+"/config")
			env.Setenv("ADMIN_EMAIL", scriptAdminEmail)
			env.Setenv("ADMIN_PASSWORD", scriptAdminPassword)
			return nil
		},
		Cmds: scriptCmds,
	})
}

// scriptCmds are the commands the scripts add to testscript's own.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"serve":    cmdServe,
	"exitcode": cmdExitcode,
	"apicall":  cmdAPICall,
	"envset":   cmdEnvset,
	"hang":     cmdHang,
	"sleep":    cmdSleep,
	"recipe":   cmdRecipe,
}

// recipe NAME FILE: write the script block of docs/recipes.md marked
// "<!-- recipe: NAME -->" to FILE, exactly as the reader sees it, so that a
// script runs what the documentation tells people to run.
func cmdRecipe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: recipe NAME FILE")
	}
	doc, err := os.ReadFile(recipesDoc)
	ts.Check(err)
	block, err := recipeBlock(string(doc), args[0])
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(block), 0o755))
}

// recipesDoc is docs/recipes.md, from cmd/btk where the tests start.
var recipesDoc, _ = filepath.Abs(filepath.Join("..", "..", "docs", "recipes.md"))

// recipeBlock returns the body of the first fenced code block after the
// marker of recipe name.
func recipeBlock(doc, name string) (string, error) {
	marker := "<!-- recipe: " + name + " -->"
	i := strings.Index(doc, marker)
	if i < 0 {
		return "", fmt.Errorf("docs/recipes.md has no %q", marker)
	}
	rest := doc[i+len(marker):]
	open := strings.Index(rest, "\n```")
	if open < 0 {
		return "", fmt.Errorf("no code block after %q", marker)
	}
	rest = rest[open+1:]
	rest = rest[strings.Index(rest, "\n")+1:] // past the ```bash line
	end := strings.Index(rest, "\n```")
	if end < 0 {
		return "", fmt.Errorf("the code block after %q does not end", marker)
	}
	return rest[:end+1], nil
}

// sleep DURATION: wait, as for a key's expiry.
func cmdSleep(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sleep DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}

// serve [flags]: start `btk serve` on a free port with a database in $WORK,
// bootstrapped with $ADMIN_EMAIL and $ADMIN_PASSWORD, wait until /readyz
// answers and set BTK_SERVER. The server is stopped with SIGINT at the end.
func cmdServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! serve")
	}
	st := scriptT{ts}
	addr := testproc.FreeAddr(st)
	bin, err := exec.LookPath("btk")
	ts.Check(err)
	logFile, err := os.Create(ts.MkAbs("serve.log"))
	ts.Check(err)
	defer logFile.Close() // the process has its own descriptor
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--db", ts.MkAbs("btk.db")}, args...)...)
	// A clean environment: no BTK_* setting of the developer's leaks in.
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + ts.Getenv("WORK"),
		"TMPDIR=" + ts.Getenv("TMPDIR"),
		"GOCOVERDIR=" + os.Getenv("GOCOVERDIR"),
		"BTK_BOOTSTRAP_EMAIL=" + ts.Getenv("ADMIN_EMAIL"),
		"BTK_BOOTSTRAP_PASSWORD=" + ts.Getenv("ADMIN_PASSWORD"),
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = ts.Getenv("WORK") // relative paths of a config file are in $WORK
	p := testproc.Start(st, cmd, os.Interrupt)
	p.LogFiles = []string{logFile.Name()}
	url := "http://" + addr
	p.WaitFor(st, url+"/readyz to answer 200", 15*time.Second, func() bool {
		resp, err := testHTTP.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ts.Setenv("BTK_SERVER", url)
	ts.Setenv("SERVE_ADDR", addr)
}

// scriptT lets testproc end a script's processes when the script ends.
type scriptT struct{ *testscript.TestScript }

func (s scriptT) Cleanup(f func()) { s.Defer(f) }
func (scriptT) Helper()            {}

// hang: listen on a free port, accept connections and never answer; set
// HANG_SERVER to its address (for --timeout).
func cmdHang(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: hang")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	ts.Defer(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	ts.Setenv("HANG_SERVER", "http://"+ln.Addr().String())
}

// exitcode N prog [args...]: run prog like exec and check that it exits
// with status N.
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// apicall KEYFILE: call the server as a backend would, with the API key in
// KEYFILE as X-Api-Key, asking tenantInfo; stdout gets "HTTP <status>" and
// the body.
func cmdAPICall(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: apicall KEYFILE")
	}
	key := strings.TrimSpace(ts.ReadFile(args[0]))
	req, err := http.NewRequest(http.MethodPost, ts.Getenv("BTK_SERVER")+"/graphql",
		strings.NewReader(`{"query":"{ tenantInfo { id name } }"}`))
	ts.Check(err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	resp, err := testHTTP.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "HTTP %d\n%s\n", resp.StatusCode, body)
}

// envset NAME FILE [FIELD]: set NAME to the content of FILE (stdout, stderr
// or a file) without surrounding blanks, or to the string at FIELD (a dotted
// path such as apiKey.id) of the JSON object in FILE.
func cmdEnvset(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: envset NAME FILE [FIELD]")
	}
	value := strings.TrimSpace(ts.ReadFile(args[1]))
	if len(args) == 3 {
		var v any
		ts.Check(json.Unmarshal([]byte(value), &v))
		for _, name := range strings.Split(args[2], ".") {
			obj, _ := v.(map[string]any)
			v = obj[name]
		}
		s, ok := v.(string)
		if !ok {
			ts.Fatalf("%s has no string field %q", args[1], args[2])
		}
		value = s
	}
	ts.Setenv(args[0], value)
}
