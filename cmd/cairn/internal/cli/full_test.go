package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// On a full disk (a real tmpfs), 'doc update' fails at once saying what to
// do, instead of retrying the full disk 100 times; 'fs mv' that fills the disk
// half-way says what it left and what finishes it, as after Ctrl-C, and
// 'fs recover' finishes it once space is freed.
func TestFullDiskCommands(t *testing.T) {
	t.Parallel()
	disk := testenv.SmallDisk(t, 2<<20) // six objects of 100 KiB, twice
	store := filepath.Join(disk, "store")
	url := "file://" + store
	if err := os.MkdirAll(filepath.Join(store, ".cairn"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	body := filepath.Join(files, "doc.json")
	if err := os.WriteFile(body, []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "doc", "create", url+"/doc.json", "--file", body); code != 0 {
		t.Fatalf("doc create: %d %s", code, stderr)
	}
	obj := filepath.Join(files, "obj")
	if err := os.WriteFile(obj, bytes.Repeat([]byte("x"), 100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if code, _, stderr := run(t, "put", obj, fmt.Sprintf("%s/src/f%d", url, i)); code != 0 {
			t.Fatalf("put: %d %s", code, stderr)
		}
	}

	// Room for the locks, the journal and two or three copies, not six.
	var st syscall.Statfs_t
	if err := syscall.Statfs(disk, &st); err != nil {
		t.Fatal(err)
	}
	spare := filepath.Join(disk, "spare")
	if err := os.WriteFile(spare, make([]byte, int64(st.Bavail)*int64(st.Bsize)-300<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "fs", "mv", "--concurrency", "1", url+"/src/", url+"/dst/")
	if code != cli.ExitRuntime {
		t.Fatalf("fs mv filling the disk: exit %d, want %d; stderr %s", code, cli.ExitRuntime, stderr)
	}
	for _, re := range []string{`rename src/ -> dst/ stopped: .*is full: free space and retry`, `(at least )?[1-5] of 6 objects copied to dst/ \((\d+ more copies were under way when it stopped and may have landed; )?the source is untouched\)`,
		`the rename is journaled \(cairn-journal/[^)]+\) and will be finished by 'cairn fs recover --store ` + regexp.QuoteMeta(url) + `'`} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("fs mv on a filling disk: stderr %q does not match %q", stderr, re)
		}
	}

	free := testenv.FillDisk(t, disk)
	code, _, stderr = run(t, "doc", "update", url+"/doc.json", "--set", "a=2")
	if code != cli.ExitRuntime || !strings.Contains(stderr, "is full: free space and retry") || strings.Contains(stderr, "giving up after") {
		t.Fatalf("doc update on a full disk: exit %d, stderr %q; want exit 1 at the first write, saying the disk is full", code, stderr)
	}

	free()
	os.Remove(spare)
	if code, _, stderr := run(t, "fs", "recover", "--store", url); code != 0 {
		t.Fatalf("fs recover after space was freed: %d %s", code, stderr)
	}
	for i := range 6 {
		if _, err := os.Stat(filepath.Join(store, "dst", fmt.Sprintf("f%d", i))); err != nil {
			t.Errorf("after the roll-forward: %v", err)
		}
	}
	if code, _, stderr := run(t, "doc", "update", url+"/doc.json", "--set", "a=2"); code != 0 {
		t.Fatalf("doc update after space was freed: %d %s", code, stderr)
	}
}
