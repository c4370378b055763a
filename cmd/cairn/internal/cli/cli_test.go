package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() {
		if binPath != "" {
			os.RemoveAll(filepath.Dir(binPath))
		}
	})
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodesAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		args    []string
		code    int
		errHint string
	}{
		{[]string{"probe"}, cli.ExitUsage, "accepts 1 arg"},
		{[]string{"probe", "ftp://x/y"}, cli.ExitUsage, "unknown scheme"},
		{[]string{"probe", "s3://"}, cli.ExitUsage, "has no bucket"},
		{[]string{"probe", "file:///x?nosync=maybe"}, cli.ExitUsage, "not a boolean"},
		{[]string{"probe", dir, "--require", "teleport"}, cli.ExitUsage, "not a probe check"},
		{[]string{"probe", dir, "--no-such-flag"}, cli.ExitUsage, "unknown flag"},
		{[]string{"frobnicate"}, cli.ExitUsage, "unknown command"},
		{[]string{"--log-level", "loud", "version"}, cli.ExitUsage, "log-level"},
		{[]string{"bench", "objstore", "--store", dir, "--ops", "1"}, cli.ExitUsage, "--ops"},
		{[]string{"bench", "rss", "--keep"}, cli.ExitUsage, "--keep keeps the filled ledgers in --dir"},
		{[]string{"bench", "rss", "--records", "0,20000"}, cli.ExitUsage, "--records 0"},
		{[]string{"serve", "--ledger", filepath.Join(dir, "l.db"), "--handler-exec", "true", "--lease", "1500ms"}, cli.ExitUsage, "--lease 1.5s is too short"},
		{[]string{"probe", dir}, cli.ExitOK, ""},
		{[]string{"version"}, cli.ExitOK, ""},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code {
			t.Errorf("cairn %q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, stderr)
		}
		if tc.errHint != "" {
			if !strings.Contains(stderr, tc.errHint) {
				t.Errorf("cairn %q: stderr %q does not mention %q", tc.args, stderr, tc.errHint)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("cairn %q: error is %d lines, want one: %q", tc.args, n+1, stderr)
			}
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildCairn builds the real binary once per test run.
func buildCairn(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "cairn")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/cairn-s3/cairn/cmd/cairn").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// bench docs through the real binary, with worker processes, on an fs store:
// it must finish, verify its counters and print ratios (figures are not judged).
func TestBenchDocsWithProcesses(t *testing.T) {
	t.Parallel()
	bin := buildCairn(t)
	out, err := exec.Command(bin, "bench", "docs", "--store", t.TempDir(), "--writers", "1,4", "--duration", "300ms",
		"--procs", "2", "--proc-writers", "2", "--json").Output()
	if err != nil {
		t.Fatalf("bench docs: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 result lines, got %q", out)
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last["name"] != "docs/2-processes-x-2-writers" {
		t.Fatalf("last line %q: %v", lines[2], err)
	}
	if r, _ := last["ratio"].(float64); r <= 0 {
		t.Fatalf("ratio %v", last["ratio"])
	}
}

func TestProbeJSONOnFS(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, "probe", t.TempDir(), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep objstore.ProbeReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not a probe report: %v\n%s", err, out)
	}
	want := objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true, CopyIfAbsent: true, CopyIfMatch: true, MultipartIfAbsent: true, MultipartIfMatch: true}
	if rep.Capabilities != want {
		t.Errorf("fs capabilities %+v, want all enforced", rep.Capabilities)
	}
}

func TestBenchObjstoreJSON(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, "bench", "objstore", "--store", t.TempDir(), "--ops", "20", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "unit", "baseline", "cairn", "ratio"} {
		if _, ok := last[k]; !ok {
			t.Errorf("last line lacks %q: %v", k, last)
		}
	}
	if r, _ := last["ratio"].(float64); r <= 0 {
		t.Errorf("ratio = %v", last["ratio"])
	}
}

// The real binary against real MinIO: the probe must tell the truth — MinIO
// enforces conditional PUT and multipart completion and ignores conditions on
// DELETE and on the CopyObject destination.
func TestProbeMinIOWithBinary(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	_, url := testenv.NewBucket(t, ep)
	bin := buildCairn(t)
	cmd := exec.Command(bin, "probe", url, "--json")
	cmd.Env = append(os.Environ(), ep.Env()...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cairn probe: %v", err)
	}
	var rep objstore.ProbeReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Capabilities
	if !c.PutIfAbsent || !c.PutIfMatch || !c.MultipartIfAbsent || !c.MultipartIfMatch {
		t.Errorf("MinIO enforces conditional PUT and multipart completion; probe says %+v", c)
	}
	if c.DeleteIfMatch || c.CopyIfAbsent || c.CopyIfMatch {
		t.Errorf("MinIO ignores DELETE If-Match and CopyObject destination conditions; probe says %+v", c)
	}
	if rep.Winners != 1 {
		t.Errorf("racing creates: %d winners", rep.Winners)
	}
	cmd = exec.Command(bin, "probe", url, "--require", "put-if-absent,delete-if-match")
	cmd.Env = append(os.Environ(), ep.Env()...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitPrecondition {
		t.Fatalf("--require delete-if-match on MinIO: %v, want exit 3", err)
	}
	if !strings.Contains(stderr.String(), "delete-if-match") {
		t.Errorf("stderr does not name the missing check: %q", stderr.String())
	}
	cmd = exec.Command(bin, "probe", "s3://cairn-no-such-bucket?endpoint="+ep.URL+"&path_style=true")
	cmd.Env = append(os.Environ(), ep.Env()...)
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitRuntime || !strings.Contains(stderr.String(), "does not exist") {
		t.Fatalf("probe of a missing bucket: %v %q, want exit 1 saying the bucket does not exist", err, stderr.String())
	}
}
