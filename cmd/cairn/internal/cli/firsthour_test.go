package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// runBin runs the real binary in dir with extra environment variables and
// returns its exit code, stdout and stderr. A run that has not ended in two
// minutes is killed and fails the test.
func runBin(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildCairn(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("cairn %q did not end in 2 minutes; stderr:\n%s", args, errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatal(err)
	return -1, "", ""
}

// TestEmptyBucketIsNotALocalPath: "s3://$BUCKET/reports/f.txt" with BUCKET
// unset once wrote ./s3:/reports/f.txt and exited 0.
func TestEmptyBucketIsNotALocalPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"put", "f.txt", "s3:///reports/f.txt"},
		{"fs", "ls", "s3:///reports/"},
		{"doc", "get", "s3:///reports/f.json"},
		{"put", "f.txt", "s3:reports/f.txt"},
	} {
		code, _, stderr := runBin(t, dir, nil, args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "s3") || !(strings.Contains(stderr, "has no bucket") || strings.Contains(stderr, "URL scheme")) {
			t.Errorf("cairn %q: exit %d, stderr %q; want exit 2 naming the missing bucket", args, code, stderr)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("the commands left %d entries in the working directory, want only f.txt", len(ents))
	}
}

// TestLogLevelFromEnvAndConfig: CAIRN_LOG_LEVEL and log-level in --config go
// through the flag's own parsing (they were read after the logger was built:
// debug printed nothing, bogus was accepted); JSON logs print durations as Go
// durations, not nanoseconds.
func TestLogLevelFromEnvAndConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cairn.yaml")
	serve := []string{"serve", "--handler-exec", "true", "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0"}
	for _, bad := range []struct {
		env  []string
		yaml string
		want string
	}{
		{[]string{"CAIRN_LOG_LEVEL=bogus"}, "", "CAIRN_LOG_LEVEL"},
		{nil, "log-level: bogus\n", "log-level"},
	} {
		args := serve
		if bad.yaml != "" {
			if err := os.WriteFile(cfg, []byte(bad.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(append([]string{}, serve...), "--config", cfg)
		}
		code, _, stderr := runBin(t, dir, bad.env, args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, bad.want) || !strings.Contains(stderr, "not a log level") {
			t.Errorf("%v %q: exit %d, stderr %q; want exit 2 naming %s", bad.env, bad.yaml, code, stderr, bad.want)
		}
	}
	if err := os.WriteFile(cfg, []byte("log-level: info\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"CAIRN_LOG_LEVEL=info"}, serve},
		{nil, append(append([]string{}, serve...), "--config", cfg)},
	} {
		line := serveStartLine(t, dir, c.env, c.args...)
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v %v: log line is not JSON: %q", c.env, c.args, line)
		}
		if rec["lease"] != "30s" {
			t.Errorf("lease logged as %v, want \"30s\"", rec["lease"])
		}
	}
}

// serveStartLine runs cairn serve until it logs that it started, stops it,
// and returns that log line.
func serveStartLine(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(buildCairn(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen []string
		for sc.Scan() {
			if strings.Contains(sc.Text(), "cairn serve started") {
				found <- sc.Text()
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
			seen = append(seen, sc.Text())
		}
		found <- "not found in: " + strings.Join(seen, "\n")
	}()
	select {
	case l := <-found:
		if strings.HasPrefix(l, "not found in") {
			t.Fatalf("%v cairn %q: no start line: %s", env, args, l)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("%v cairn %q: no start line in 60s", env, args)
	}
	return ""
}

// TestPutAndErrorsOnMinIO: a put whose condition already fails is refused
// before any upload, saying why; errors lead with what happened in one short
// line (the SDK chain only at --log-level debug) and are JSON under --json;
// content types come from the extension; --json keys are snake_case.
func TestPutAndErrorsOnMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	_, store := testenv.NewBucket(t, ep)
	dir := t.TempDir()
	file := filepath.Join(dir, "report.json")
	if err := os.WriteFile(file, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := strings.Replace(store, "?", "/reports/r.json?", 1)
	code, out, stderr := runBin(t, dir, ep.Env(), "put", file, obj, "--json")
	var info map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil {
		t.Fatalf("put: exit %d, %q %q", code, out, stderr)
	}
	if info["etag"] == nil || info["key"] != "reports/r.json" {
		t.Fatalf("put --json keys are not snake_case: %s", out)
	}
	code, out, stderr = runBin(t, dir, ep.Env(), "fs", "ls", store)
	if code != 0 || !strings.Contains(out, "reports/") {
		t.Fatalf("fs ls of the bucket's root: exit %d, %q %q", code, out, stderr)
	}
	code, out, _ = runBin(t, dir, ep.Env(), "doc", "get", obj, "--json")
	if code != 0 || !strings.Contains(out, `"a"`) {
		t.Fatalf("doc get: exit %d %q", code, out)
	}

	code, _, stderr = runBin(t, dir, ep.Env(), "put", file, obj, "--if-match", "0123456789abcdef0123456789abcdef")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "nothing was uploaded") || !strings.Contains(stderr, info["etag"].(string)) {
		t.Errorf("put --if-match with a wrong ETag: exit %d, %q; want exit 3 before uploading, naming the current ETag", code, stderr)
	}
	code, _, stderr = runBin(t, dir, ep.Env(), "put", file, obj, "--if-absent")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "already exists") {
		t.Errorf("put --if-absent on an existing key: exit %d, %q", code, stderr)
	}

	badKey := append(ep.Env(), "AWS_SECRET_ACCESS_KEY=not-the-secret")
	code, _, stderr = runBin(t, dir, badKey, "put", file, obj)
	if code == 0 || !strings.HasPrefix(stderr, "cairn: ") || !strings.Contains(stderr, "rejected the credentials") ||
		strings.Contains(stderr, "RequestID") || strings.Contains(stderr, "operation error") || len(stderr) > 400 {
		t.Errorf("put with a wrong secret key: exit %d, stderr %q: want a short error leading with what happened, without the SDK chain", code, stderr)
	}
	_, _, stderr = runBin(t, dir, badKey, "put", file, obj, "--log-level", "debug")
	if !strings.Contains(stderr, "RequestID") {
		t.Errorf("--log-level debug does not show the SDK's error chain: %q", stderr)
	}
	missing := strings.Replace(store, "?", "/no/such.json?", 1)
	code, _, stderr = runBin(t, dir, ep.Env(), "doc", "get", missing, "--json")
	var je struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(lastLine(stderr)), &je); err != nil || je.Error == "" || je.ExitCode != code {
		t.Errorf("--json error is not JSON: %q", stderr)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestVersionReportsBuild: version says which Go built it (and the module
// version and commit when the build info has them), not only "dev".
func TestVersionReportsBuild(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "version", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["go"] != runtime.Version() || v["version"] == "" {
		t.Fatalf("version --json: %d %q", code, out)
	}
}
