package fsstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// Temporary data no live writer holds is removed — a dead writer's
// temporary file and upload, an older cairn's once a day old — while an
// upload another Backend (here: of this process, as for another process;
// flock(2) locks belong to open files) is still using survives and completes.
func TestRemoveStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	live, err := fsstore.OpenBackend(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	id, err := live.CreateMultipart(ctx, "live.bin", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := live.UploadPart(ctx, "live.bin", id, 1, bytes.NewReader([]byte("part one ")), 9)
	if err != nil {
		t.Fatal(err)
	}
	// A dead writer's leftovers: a temporary file and an upload whose locks
	// no one holds (their writer's files were closed by its death).
	dead, err := fsstore.OpenBackend(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadID, err := dead.CreateMultipart(ctx, "dead.bin", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.UploadPart(ctx, "dead.bin", deadID, 1, bytes.NewReader(make([]byte, 1000)), 1000); err != nil {
		t.Fatal(err)
	}
	dead.Close()
	write := func(name string, age time.Duration) string {
		p := filepath.Join(dir, ".cairn", "tmp", name)
		if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Now().Add(-age), time.Now().Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deadTemp := write("w-0123456789abcdef01234567", 0)
	oldLegacy := write("0123456789abcdef01234567", 25*time.Hour) // an older cairn's, a day old
	newLegacy := write("abcdef0123456789abcdef01", time.Minute)  // an older cairn's, maybe live

	// Open removes them already; RemoveStale finds nothing more.
	b, err := fsstore.OpenBackend(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.RemoveStale()
	if err != nil || st.Files != 0 {
		t.Fatalf("RemoveStale after Open: %+v %v", st, err)
	}
	for _, p := range []string{deadTemp, oldLegacy, filepath.Join(dir, ".cairn", "uploads", deadID)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived RemoveStale (%v)", p, err)
		}
	}
	if _, err := os.Stat(newLegacy); err != nil {
		t.Errorf("an older cairn's young temporary file was removed: %v", err)
	}
	// The live upload goes on.
	p2, err := live.UploadPart(ctx, "live.bin", id, 2, bytes.NewReader([]byte("part two")), 8)
	if err != nil {
		t.Fatalf("the live upload lost its parts: %v", err)
	}
	if _, err := live.CompleteMultipart(ctx, "live.bin", id, []objstore.Part{p1, p2}, objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "live.bin")); err != nil || string(data) != "part one part two" {
		t.Fatalf("live.bin: %q %v", data, err)
	}
}
