package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/lambdatest"
)

// cairn bench lambda removes its temporary directory on every way out but a
// failed run: a usage error found after it was made, and SIGTERM mid-run (it
// was left in /tmp by both, and by --phases).
func TestBenchLambdaRemovesItsDirectory(t *testing.T) {
	t.Parallel()
	rie := lambdatest.RIE(t)
	bin := buildCairn(t)
	for _, tc := range []struct {
		name string
		args []string
		term bool // SIGTERM once the directory exists
		code int
	}{
		{"usage error", []string{"--store", "http://127.0.0.1:1/not-s3"}, false, cli.ExitUsage},
		{"SIGTERM", nil, true, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			cmd := exec.Command(bin, append([]string{"bench", "lambda", "--rie", rie, "--sandboxes", "1", "--invocations", "100000", "--rounds", "1"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			p := start(t, cmd)
			if tc.term {
				for {
					if m, _ := filepath.Glob(filepath.Join(tmp, "cairn-bench-lambda-*")); len(m) > 0 {
						break
					}
					if p.exited() {
						t.Fatalf("bench lambda ended before it made its directory: exit %d, %s", p.code, p.stderr)
					}
					time.Sleep(10 * time.Millisecond)
				}
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := p.wait(t); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, p.stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(tmp, "cairn-bench-lambda-*")); len(m) != 0 {
				t.Fatalf("bench lambda left %v behind (stderr %s)", m, p.stderr)
			}
		})
	}
}
