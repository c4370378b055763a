package fsstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// Files written by other tools are objects too, with the MD5 ETag of their
// bytes, and conditions see their changes.
func TestExternalWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, dir := newFS(t)
	s := objstore.New(b, nil)
	v1, err := s.PutBytes(ctx, "doc.txt", []byte("v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "doc.txt"), []byte("edited by vim"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(ctx, "doc.txt")
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte("edited by vim"))
	if info.ETag != hex.EncodeToString(sum[:]) {
		t.Fatalf("ETag after an external edit = %s, want the MD5 of the new bytes", info.ETag)
	}
	if _, err := s.PutBytes(ctx, "doc.txt", []byte("v2"), &objstore.PutOptions{If: objstore.IfMatch(v1.ETag)}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("CAS with the ETag from before the external edit: %v, want ErrPreconditionFailed", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "made", "by"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "made", "by", "cp"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	infos, err := s.ListAll(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	if strings.Join(keys, ",") != "doc.txt,made/by/cp" {
		t.Fatalf("listing = %q (the .cairn bookkeeping must not show)", keys)
	}
}

func TestConfinement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, dir := newFS(t)
	s := objstore.New(b, nil)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(ctx, "escape/pwned", []byte("x"), nil); err == nil {
		t.Fatal("a write through a symlink left the root")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("files appeared outside the root: %v", ents)
	}
	if got, _ := s.ListAll(ctx, "", nil); len(got) != 0 {
		t.Fatalf("symlinks must not be listed: %v", got)
	}
	for _, k := range []string{".cairn/meta/x", ".cairn", strings.Repeat("s", 256) + "/x"} {
		if _, err := s.PutBytes(ctx, k, []byte("x"), nil); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %.30q: %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := objstore.Open(ctx, "file://"+missing+"?nocreate=true", nil); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("nocreate on a missing dir: %v, want ErrBucketNotFound", err)
	}
	for _, raw := range []string{"file://host/dir", "file://", "file:///d?colour=1", "file:///d?nosync=perhaps", "ftp://x/y"} {
		if _, err := objstore.Open(ctx, raw, nil); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("Open(%q): %v, want ErrInvalidURL", raw, err)
		}
	}
	rel := filepath.Join(t.TempDir(), "rel")
	s, err := objstore.Open(ctx, rel, nil) // a plain path
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutBytes(ctx, "a", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rel, "a")); err != nil {
		t.Fatalf("a plain path must be a directory store: %v", err)
	}
}

const envKillChild = "CAIRN_FS_KILL_CHILD"

func init() { testenv.RegisterChild("fs-killed-writer", killedWriter) }

// TestKilledWriter kills a process that overwrites one object in a loop at
// random moments; every time, the object must be one complete version whose
// ETag is the MD5 of its bytes (no torn writes, no mislabelled ETags).
func TestKilledWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	for round := range 8 {
		cmd := testenv.Child(t, "fs-killed-writer", envKillChild+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the child's first completed write, then kill it mid-loop.
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "writing\n" {
			t.Fatalf("child: %q %v", line, err)
		}
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		s, err := fsstore.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, info, err := s.GetBytes(ctx, "torn/object")
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(data)
		if info.ETag != hex.EncodeToString(sum[:]) {
			t.Fatalf("round %d: ETag %s does not match the content", round, info.ETag)
		}
		if len(data) == 0 || !bytes.Equal(data, bytes.Repeat(data[:1], len(data))) || info.Metadata["fill"] != fmt.Sprint(data[0]) {
			t.Fatalf("round %d: torn object (%d bytes, metadata %v)", round, len(data), info.Metadata)
		}
		s.Close()
	}
}

// killedWriter is TestKilledWriter's child: it overwrites one object in the
// directory store $CAIRN_FS_KILL_CHILD until it is killed.
func killedWriter() int {
	s, err := fsstore.Open(os.Getenv(envKillChild), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; ; i++ {
		fill := byte(i%250 + 1)
		body := bytes.Repeat([]byte{fill}, 256<<10+i%1000)
		if _, err := s.PutBytes(context.Background(), "torn/object", body, &objstore.PutOptions{Metadata: map[string]string{"fill": fmt.Sprint(fill)}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if i == 0 {
			fmt.Println("writing")
		}
	}
}

// A Delete removes the folders it leaves empty; a Put beside it in the same
// deep folder tree must never see its folders vanish (CI saw `put
// "deep/a/b/c/d/e/f/12": not found`: MkdirAll lost a folder a concurrent
// Delete removed).
func TestPutBesideDeletesOfEmptyFolders(t *testing.T) {
	t.Parallel()
	putsAndDeletes(t, 4, 300, func(w, i int) string { return fmt.Sprintf("deep/a/b/c/d/%d/e/f/%d", w, i%3) })
}

// putsAndDeletes runs writers goroutines on one directory store, each
// putting and deleting n times the key key(writer, i) names; every call must
// succeed.
func putsAndDeletes(t *testing.T, writers, n int, key func(w, i int) string) {
	t.Helper()
	s, err := fsstore.Open(t.TempDir(), &fsstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range n {
				key := key(w, i)
				if _, err := s.PutBytes(ctx, key, []byte("x"), nil); err != nil {
					t.Errorf("put %s: %v", key, err)
					return
				}
				if err := s.Delete(ctx, key, objstore.Condition{}); err != nil {
					t.Errorf("delete %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A directory store nested in another (cairn put creates one in a file's
// directory) keeps its bookkeeping in its own .cairn/: the outer store neither
// lists it nor lets a key name it, so a folder operation never moves it.
func TestNestedStoreBookkeepingHidden(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	inner, err := fsstore.Open(filepath.Join(root, "meta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inner.PutBytes(ctx, "r.json", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	inner.Close()
	outer, err := fsstore.Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	all, err := outer.ListAll(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if strings.Contains(in.Key, ".cairn") {
			t.Errorf("the outer store lists %q", in.Key)
		}
	}
	if len(all) != 1 || all[0].Key != "meta/r.json" {
		t.Errorf("listed %v, want only meta/r.json", all)
	}
	if _, err := outer.PutBytes(ctx, "meta/.cairn/x", []byte("x"), nil); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("a key naming a nested .cairn: %v, want ErrInvalidKey", err)
	}
}

// Puts and deletes in one folder, racing: a Put whose folder another Put
// made while a Delete removed it again (empty) finds neither a folder nor a
// conflict, which is no conflict and is tried again (`cairn demo` once
// failed with `put "a+b=c/10+1.txt": invalid key: the key is both an object
// and a folder: mkdirat a+b=c: file exists`: os.Root's MkdirAll answers
// EEXIST when the folder it found existing is gone when it looks at it).
func TestPutsBesideDeletesInOneFolder(t *testing.T) {
	t.Parallel()
	putsAndDeletes(t, 8, 400, func(w, i int) string { return fmt.Sprintf("a+b=c/%d+%d.txt", w, i%2) })
}
