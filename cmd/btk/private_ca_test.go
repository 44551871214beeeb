package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runProcessEnv is runProcess with extra environment and standard input.
func runProcessEnv(t *testing.T, env []string, stdin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^TestServeProcess$", "--"}, args...)...)
	cmd.Env = append(procEnviron(t.TempDir()), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("btk %v: %v", args, err)
	}
	return 0, out.String()
}

// docs/design.md#configuration: a server whose certificate comes from a
// private CA is trusted through SSL_CERT_FILE.
func TestPrivateCAThroughSSLCertFile(t *testing.T) {
	skipIfShort(t, "starts btk serve")
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.issue(t, 7, certFile, keyFile)
	p := startServeHTTPS(t, ca.client(), filepath.Join(dir, "btk.db"), "--tls-cert", certFile, "--tls-key", keyFile)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	login := []string{"login", "--server", p.url, "--email", procAdminEmail, "--password-stdin"}

	code, out := runProcessEnv(t, nil, procAdminPassword, login...)
	if code == 0 || !strings.Contains(out, "certificate") {
		t.Errorf("without SSL_CERT_FILE: exit %d, want a refusal naming the certificate:\n%s", code, out)
	}
	code, out = runProcessEnv(t, []string{"SSL_CERT_FILE=" + caFile}, procAdminPassword, login...)
	if code != 0 || !strings.Contains(out, "Logged in") {
		t.Errorf("with SSL_CERT_FILE: exit %d:\n%s", code, out)
	}
}
