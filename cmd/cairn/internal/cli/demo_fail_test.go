package cli_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
)

// TestDemoStoreFails: cairn demo ends with an error that says what failed and
// what to check when the store refuses some of its writes (issue 19: it hung
// for ever once every writer had met a failure). Here a file named "data" in
// the bucket directory makes every put under data/ fail, one key in seven. The
// context's deadline is only the bound past which the demo counts as hung.
func TestDemoStoreFails(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	if err := os.WriteFile(filepath.Join(bucket, "data"), []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	storeURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(bucket)}).String()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, stderr bytes.Buffer
		code := cli.Main(ctx, []string{"demo", "--writes", "800", "--keys", "400", "--store", storeURL, "--dir", t.TempDir()}, strings.NewReader(""), &out, &stderr)
		done <- result{code, out.String(), stderr.String()}
	}()
	select {
	case <-ctx.Done():
		t.Fatalf("cairn demo did not end within 2 minutes of a failing store (%v)", context.Cause(ctx))
	case r := <-done:
		if r.code != cli.ExitRuntime || ctx.Err() != nil {
			t.Fatalf("demo on a failing store: exit %d (context: %v)\n%s\n%s", r.code, ctx.Err(), r.out, r.stderr)
		}
		for _, want := range []string{"writing objects to the store failed", "data/obj-", "check that the store"} {
			if !strings.Contains(r.stderr, want) {
				t.Fatalf("the error should say %q: exit %d\n%s", want, r.code, r.stderr)
			}
		}
		t.Logf("exit %d: %s", r.code, r.stderr)
	}
}
