package cli_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// countUnder counts the objects under prefix in the store at url.
func countUnder(t *testing.T, url, prefix string) int {
	t.Helper()
	s, err := objstore.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	for _, err := range s.List(context.Background(), prefix, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// Interrupted (SIGINT) while writing, bench audit still removes what it
// wrote. The rest of bench audit is tested in package bench.
func TestBenchAuditInterruptedRemovesItsObjects(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildCairn(t), "bench", "audit", "--store", store, "--objects", "100000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once objects are being written.
	for countUnder(t, store, "cairn-bench-audit/") == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("bench audit did not end after an interrupt; stderr: %s", stderr.String())
	}
	if n := countUnder(t, store, "cairn-bench-audit/"); n != 0 {
		t.Errorf("interrupted bench audit left %d objects; stderr: %s", n, stderr.String())
	}
	if !strings.Contains(stderr.String(), "benchmark objects under cairn-bench-audit/100000/") {
		t.Errorf("interrupted bench audit did not say it removed its objects: %q", stderr.String())
	}
}
