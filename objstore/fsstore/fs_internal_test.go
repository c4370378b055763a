package fsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
)

// A crash after the sidecar was renamed but before the data was leaves the old
// file in place with a sidecar that lists both versions: the old file must still
// be described by its own ETag and metadata.
func TestCrashBetweenSidecarAndData(t *testing.T) {
	ctx := context.Background()
	b, err := OpenBackend(t.TempDir(), &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := objstore.New(b, nil)
	old, err := s.PutBytes(ctx, "k", []byte("old"), &objstore.PutOptions{Metadata: map[string]string{"v": "old"}})
	if err != nil {
		t.Fatal(err)
	}
	// Do the first half of a commit by hand.
	tmp, err := b.writeTemp(false, bytes.NewReader([]byte("new")))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := b.check("k", objstore.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	ne := entry{Ino: inode(tmp.fi), Size: tmp.fi.Size(), MtimeNs: tmp.fi.ModTime().UnixNano(), ETag: tmp.etag, Metadata: map[string]string{"v": "new"}}
	if err := b.writeSidecar("k", sidecar{Key: "k", Entries: []entry{ne, *cur}}); err != nil {
		t.Fatal(err)
	}
	// "Crash": the rename never happens.
	info, err := s.Head(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.ETag != old.ETag || info.Metadata["v"] != "old" {
		t.Fatalf("after a crash mid-commit: %+v, want the old ETag %s and metadata", info, old.ETag)
	}
	if _, err := s.PutBytes(ctx, "k", []byte("x"), &objstore.PutOptions{If: objstore.IfMatch(old.ETag)}); err != nil {
		t.Fatalf("CAS on the old ETag after the crash: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(b.Dir(), tmpDir))
	if len(ents) != 1 { // the orphaned temp file of the crashed write
		t.Logf("temp files: %d", len(ents))
	}
}

// The errors of a file system that takes no writes map to ErrUnwritable,
// saying what to do; other errors pass unchanged.
func TestRefusedWrites(t *testing.T) {
	t.Parallel()
	b := &Backend{dir: "/srv/data"}
	for _, tc := range []struct {
		errno syscall.Errno
		says  string // "" for an error that is not mapped
	}{
		{syscall.ENOSPC, "the disk holding /srv/data is full: free space and retry"},
		{syscall.EDQUOT, "the disk quota for /srv/data is used up"},
		{syscall.EROFS, "/srv/data is on a read-only file system"},
		{syscall.EIO, ""},
		{syscall.EACCES, ""},
	} {
		raw := &os.PathError{Op: "write", Path: "/srv/data/.cairn/tmp/w-1", Err: tc.errno}
		for _, err := range []error{b.refused(raw), b.mapErr("k", raw), b.refused(fmt.Errorf("writing: %w", raw))} {
			if tc.says == "" {
				if errors.Is(err, objstore.ErrUnwritable) || !errors.Is(err, tc.errno) {
					t.Errorf("%v: %v, want it unmapped", tc.errno, err)
				}
				continue
			}
			if !errors.Is(err, objstore.ErrUnwritable) || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%v: %v, want ErrUnwritable (still wrapping the errno) saying %q", tc.errno, err, tc.says)
			}
		}
	}
}
