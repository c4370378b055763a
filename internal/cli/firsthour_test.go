package cli_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/internal/cli"
)

// runBin runs the real binary in dir with extra environment variables and
// returns its exit code, stdout and stderr.
func runBin(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(buildCairn(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
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
