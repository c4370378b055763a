package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore"
)

// Every exit code but 130 and 143 (fs_interrupt_test.go), through Main. The
// codes come from the errors' types (usage errors typed where cobra or a
// command makes them, sentinels mapped in one table), not from their text:
// `lock run`'s argument check says neither "accepts " nor "requires ", the
// words the old matcher looked for in cobra's messages, and exits 2 all the
// same; a runtime error that happens to say "requires " exits 1.
func TestExitCodeTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file://" + dir + "/store"
	obj := store + "/obj"
	fenced := store + "/fenced"
	setup := [][]string{
		{"put", file, obj},
		{"put", file, fenced, "--fence-token", "7"},
	}
	for _, args := range setup {
		if code, _, stderr := run(t, args...); code != cli.ExitOK {
			t.Fatalf("setup cairn %q: exit %d: %s", args, code, stderr)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string // in stderr
	}{
		{"success", []string{"version"}, cli.ExitOK, ""},
		{"runtime error", []string{"doc", "get", store + "/none"}, cli.ExitRuntime, "not found"},
		{"runtime error saying requires", []string{"doc", "get", store + "/requires%20accepts%20"}, cli.ExitRuntime, "not found"},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"unknown subcommand", []string{"bench", "frobnicate"}, cli.ExitUsage, `unknown command "frobnicate" for "cairn bench"`},
		{"too few args", []string{"probe"}, cli.ExitUsage, "accepts 1 arg"},
		{"too many args", []string{"probe", dir, dir}, cli.ExitUsage, "accepts 1 arg"},
		{"no args allowed", []string{"version", "extra"}, cli.ExitUsage, "unknown command"},
		{"custom arg check", []string{"lock", "run", store + "/locks/l"}, cli.ExitUsage, "give the lease's URL"},
		{"unknown flag", []string{"probe", dir, "--no-such-flag"}, cli.ExitUsage, "unknown flag"},
		{"bad flag value", []string{"bench", "objstore", "--ops", "many"}, cli.ExitUsage, "--ops"},
		{"bad global flag", []string{"--log-level", "loud", "version"}, cli.ExitUsage, "log-level"},
		{"bad store URL", []string{"probe", "ftp://x/y"}, cli.ExitUsage, "invalid store URL"},
		{"bad ledger URL", []string{"ledger", "ls", "--ledger", "bogus://x"}, cli.ExitUsage, "invalid ledger URL"},
		{"precondition", []string{"put", file, obj, "--if-absent"}, cli.ExitPrecondition, ""},
		{"stale fencing token", []string{"put", file, fenced, "--fence-token", "6"}, cli.ExitPrecondition, "fencing token 6 is lower than token 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("cairn %q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.says) {
				t.Errorf("cairn %q: stderr %q does not say %q", tc.args, stderr, tc.says)
			}
			if usage := strings.Contains(stderr, "(see 'cairn help')"); usage != (tc.code == cli.ExitUsage) {
				t.Errorf("cairn %q: exit %d but stderr %q (a usage error, and only one, points to help)", tc.args, code, stderr)
			}
		})
	}
	t.Run("lease lost", func(t *testing.T) {
		url := store + "/locks/lost"
		done := make(chan int, 1)
		var stderr bytes.Buffer
		go func() {
			done <- cli.Main(context.Background(), []string{"lock", "run", url, "--ttl", "1s", "--", "sleep", "30"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
		}()
		ctx := t.Context()
		s, key, err := objstore.OpenObject(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		leases := docstore.Typed[lease.State](docstore.New(s, nil))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st, _, err := leases.Load(ctx, key); err == nil && st.Holder != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("lock run never took its lease")
			}
		}
		// Take it away, as a successor would after a pause.
		if _, _, err := leases.Update(ctx, key, func(st *lease.State, _ docstore.Meta) error {
			st.Holder, st.Token = "intruder", st.Token+1
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-done:
			if code != cli.ExitLeaseLost || !strings.Contains(stderr.String(), "was lost") {
				t.Errorf("lock run whose lease was taken: exit %d, want %d; stderr %q", code, cli.ExitLeaseLost, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("lock run kept running after losing its lease")
		}
	})
}
