package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// TestLockForceUnlock: cairn lock force-unlock releases a lease its holder
// still holds, says whom it released, refuses when another holder holds it,
// bumps the fencing token, and with --fence-object makes the named objects
// refuse the old holder's fenced writes.
func TestLockForceUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	store := "file://" + dir
	s, err := objstore.Open(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, err := lease.New(s, &lease.Options{Holder: "batch-7"}).TryAcquire(ctx, "locks/job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.PutBytes(ctx, s, "out/report", []byte("v1"), old.Token(), nil); err != nil {
		t.Fatal(err)
	}
	// A conflict names the holder and the way out.
	code, _, stderr := run(t, "lock", "run", "--store", store, "--key", "locks/job", "--", "true")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "held by batch-7 (pid ") || !strings.Contains(stderr, "force-unlock") {
		t.Fatalf("lock run on a held lease: exit %d %q", code, stderr)
	}
	code, _, stderr = run(t, "lock", "force-unlock", "--store", store, "--key", "locks/job", "--holder", "batch-8")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "nothing released") || !strings.Contains(stderr, "held by batch-7") {
		t.Fatalf("force-unlock of another holder: exit %d %q", code, stderr)
	}
	code, out, stderr := run(t, "lock", "force-unlock", "--store", store, "--key", "locks/job", "--holder", "batch-7", "--fence-object", "out/report")
	if code != 0 || !strings.Contains(out, "held by batch-7") || !strings.Contains(out, "fencing token 1") || !strings.Contains(out, "next holder's will be 3") ||
		!strings.Contains(out, "out/report: fence mark raised to 2") {
		t.Fatalf("force-unlock: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := fence.PutBytes(ctx, s, "out/report", []byte("v2"), old.Token(), nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the old holder's fenced write after force-unlock: %v, want ErrStale", err)
	}
	if b, _, err := fence.Get(ctx, s, "out/report"); err != nil || string(b) != "v1" {
		t.Fatalf("the marked object: %q %v, want it unchanged", b, err)
	}
	code, out, _ = run(t, "lock", "status", "--store", store, "--key", "locks/job")
	if code != 0 || !strings.Contains(out, "free (last fencing token 2)") {
		t.Fatalf("status after force-unlock: %d %s", code, out)
	}
	if err := old.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("the old holder's release: %v, want ErrLeaseLost", err)
	}
	code, _, stderr = run(t, "lock", "force-unlock", "--store", store, "--key", "locks/job")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "it is free") {
		t.Fatalf("force-unlock of a free lease: exit %d %q", code, stderr)
	}
}

// TestLockForceUnlockTreeSession: lock status --tree names the sessions of
// tree locks, and force-unlock --tree-session frees a session's locks at
// once.
func TestLockForceUnlockTreeSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := "file://" + t.TempDir()
	s, err := objstore.Open(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := treelock.New(s, nil)
	defer a.Close()
	ha, err := a.Acquire(ctx, treelock.Request{Write: []string{"/jobs/x"}})
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "lock", "status", "--store", store, "--tree", "--json")
	var st struct{ Sessions []treelock.SessionInfo }
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Sessions) != 1 || !strings.Contains(st.Sessions[0].Holder, "/") {
		t.Fatalf("status --tree: exit %d %s %s", code, out, stderr)
	}
	id := st.Sessions[0].ID
	if code, out, _ := run(t, "lock", "status", "--store", store, "--tree"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, st.Sessions[0].Holder) {
		t.Fatalf("status --tree: exit %d\n%s", code, out)
	}
	b := treelock.New(s, nil)
	defer b.Close()
	if _, err := b.TryAcquire(ctx, treelock.Request{Write: []string{"/jobs/x"}}); !errors.Is(err, treelock.ErrNotAcquired) {
		t.Fatalf("before: %v", err)
	}
	code, out, stderr = run(t, "lock", "force-unlock", "--store", store, "--tree-session", id)
	if code != 0 || !strings.Contains(out, "tree-lock session "+id+" released: it was "+st.Sessions[0].Holder) {
		t.Fatalf("force-unlock --tree-session: exit %d %s %s", code, out, stderr)
	}
	hb, err := b.TryAcquire(ctx, treelock.Request{Write: []string{"/jobs/x"}})
	if err != nil || hb.Token("/jobs/x") <= ha.Token("/jobs/x") {
		t.Fatalf("right after force-unlock: %v", err)
	}
	_ = hb.Release(ctx)
	if code, _, stderr := run(t, "lock", "force-unlock", "--store", store, "--tree-session", id); code != cli.ExitPrecondition || !strings.Contains(stderr, "no such session") {
		t.Fatalf("again: exit %d %q", code, stderr)
	}
}
