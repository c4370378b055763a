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

// bench audit removes the objects it wrote, and says so (it left them all
// behind).
func TestBenchAuditRemovesItsObjects(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	code, out, stderr := runBin(t, t.TempDir(), nil, "bench", "audit", "--store", store, "--objects", "40")
	if code != 0 {
		t.Fatalf("bench audit: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "audit of 40 objects") {
		t.Errorf("bench audit printed no result: %q", out)
	}
	if n := countUnder(t, store, "cairn-bench-audit/"); n != 0 {
		t.Errorf("bench audit left %d objects under cairn-bench-audit/", n)
	}
	if !strings.Contains(stderr, "removed the 40 benchmark objects under cairn-bench-audit/40/") {
		t.Errorf("bench audit did not say it removed its objects: %q", stderr)
	}
}

// Interrupted while writing, it still removes what it wrote.
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
