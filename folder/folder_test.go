package folder_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/folder"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// keys are the awkward names a folder holds.
var keys = []string{"a.txt", "sub/b.bin", "sub/deeper/c", "ünï cødé 日本.txt", "with space/+plus+ 100%.csv", "x"}

// stores are the stores every test runs on.
func stores(t *testing.T) map[string]func(t *testing.T) *objstore.Store {
	return map[string]func(t *testing.T) *objstore.Store{
		"mem": func(t *testing.T) *objstore.Store { return mem.Open() },
		"fs": func(t *testing.T) *objstore.Store {
			s, err := fsstore.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"minio": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3(t))
			return objstore.New(b, nil)
		},
		// Enforces conditional DELETE: the rename's source deletes are
		// conditional there.
		"versitygw": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "versitygw"))
			return objstore.New(b, nil)
		},
		"gofakes3": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "gofakes3"))
			return objstore.New(b, nil)
		},
		"seaweedfs": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "seaweedfs"))
			return objstore.New(b, nil)
		},
		"ceph": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "ceph"))
			return objstore.New(b, nil)
		},
	}
}

func fill(t *testing.T, s *objstore.Store, prefix string, n int) map[string][32]byte {
	t.Helper()
	want := map[string][32]byte{}
	for i, k := range keys {
		for j := range n {
			key := fmt.Sprintf("%s%d-%s", prefix, j, k)
			if n == 1 {
				key = prefix + k
			}
			data := fmt.Appendf(nil, "%s #%d %d", k, i, j)
			if _, err := s.PutBytes(context.Background(), key, data, &objstore.PutOptions{ContentType: "text/x-test", Metadata: map[string]string{"origin": "fill"}}); err != nil {
				t.Fatal(err)
			}
			want[key[len(prefix):]] = sha256.Sum256(data)
		}
	}
	return want
}

// contents maps each key under prefix (relative) to its content hash, and
// checks metadata survived.
func contents(t *testing.T, s *objstore.Store, prefix string) map[string][32]byte {
	t.Helper()
	got := map[string][32]byte{}
	for info, err := range s.List(context.Background(), prefix, nil) {
		if err != nil {
			t.Fatal(err)
		}
		data, full, err := s.GetBytes(context.Background(), info.Key)
		if err != nil {
			t.Fatal(err)
		}
		if full.ContentType != "text/x-test" || full.Metadata["origin"] != "fill" {
			t.Errorf("%s lost its metadata: %q %v", info.Key, full.ContentType, full.Metadata)
		}
		got[info.Key[len(prefix):]] = sha256.Sum256(data)
	}
	return got
}

func equal(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// noJournal: no journal is left but the tombstones a roll-forward keeps as
// evidence (Result.Already), which Recover removes after their grace.
func noJournal(t *testing.T, s *objstore.Store) {
	t.Helper()
	left, err := s.ListAll(context.Background(), folder.JournalPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	finished := map[string]bool{}
	for _, info := range left {
		if strings.HasSuffix(info.Key, "/intent.json") {
			data, _, err := s.GetBytes(context.Background(), info.Key)
			finished[strings.TrimSuffix(info.Key, "intent.json")] = err == nil && bytes.Contains(data, []byte(`"finished":true`))
		}
	}
	for _, info := range left {
		id := info.Key[:len(folder.JournalPrefix)+strings.Index(info.Key[len(folder.JournalPrefix):], "/")+1]
		if !finished[id] {
			t.Fatalf("journal left behind: %s (of %d objects)", info.Key, len(left))
		}
	}
}

func TestOperations(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t)
			ops := folder.New(s, &folder.Options{Concurrency: 4, ChunkSize: 5}) // several manifest chunks
			defer ops.Close()
			ctx := context.Background()
			want := fill(t, s, "photos/2024/", 3)

			if _, err := ops.Rename(ctx, "photos/2024", "archive/2024/", false); err != nil {
				t.Fatal(err)
			}
			if got := contents(t, s, "archive/2024/"); !equal(got, want) {
				t.Fatalf("after rename: %d objects, want %d", len(got), len(want))
			}
			if left := contents(t, s, "photos/2024/"); len(left) != 0 {
				t.Fatalf("rename left %d sources", len(left))
			}
			if _, err := ops.Copy(ctx, "archive/2024/", "backup/", false); err != nil {
				t.Fatal(err)
			}
			if !equal(contents(t, s, "backup/"), want) || !equal(contents(t, s, "archive/2024/"), want) {
				t.Fatal("copy: source and destination must both hold the folder")
			}
			var tarball bytes.Buffer
			res, err := ops.Snapshot(ctx, "backup", &tarball)
			if err != nil || res.Objects != int64(len(want)) {
				t.Fatalf("snapshot: %+v %v", res, err)
			}
			tr := tar.NewReader(&tarball)
			seen := 0
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(tr)
				if sha256.Sum256(data) != want[h.Name] || h.PAXRecords["SCHILY.xattr.user.cairn.meta.origin"] != "fill" {
					t.Fatalf("snapshot entry %q wrong", h.Name)
				}
				seen++
			}
			if seen != len(want) {
				t.Fatalf("snapshot has %d entries, want %d", seen, len(want))
			}
			if _, err := ops.Delete(ctx, "backup/"); err != nil {
				t.Fatal(err)
			}
			if left := contents(t, s, "backup/"); len(left) != 0 {
				t.Fatalf("delete left %d", len(left))
			}
			noJournal(t, s)
		})
	}
}

func TestBadInput(t *testing.T) {
	s := mem.Open()
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}})
	ctx := context.Background()
	fill(t, s, "a/", 1)
	fill(t, s, "b/", 1)
	cases := []struct {
		name string
		err  func() error
		want error
	}{
		{"source missing", func() error { _, err := ops.Rename(ctx, "nope/", "c/", false); return err }, folder.ErrNotFound},
		{"destination inside source", func() error { _, err := ops.Rename(ctx, "a/", "a/inner/", false); return err }, folder.ErrInvalid},
		{"source inside destination", func() error { _, err := ops.Copy(ctx, "a/x/", "a/", false); return err }, folder.ErrInvalid},
		{"same folder", func() error { _, err := ops.Rename(ctx, "a", "a/", false); return err }, folder.ErrInvalid},
		{"destination not empty", func() error { _, err := ops.Rename(ctx, "a/", "b/", false); return err }, folder.ErrNotEmpty},
		{"whole bucket", func() error { _, err := ops.Delete(ctx, "/"); return err }, folder.ErrInvalid},
		{"dot-dot", func() error { _, err := ops.Delete(ctx, "a/../b"); return err }, folder.ErrInvalid},
		{"reserved", func() error { _, err := ops.Delete(ctx, "cairn-journal/"); return err }, folder.ErrReserved},
		{"reserved parent", func() error { _, err := ops.Delete(ctx, "cairn-locks/tree"); return err }, folder.ErrReserved},
	}
	for _, tc := range cases {
		if err := tc.err(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Overwrite merges into a non-empty destination.
	if _, err := ops.Copy(ctx, "a/", "b/", true); err != nil {
		t.Fatal(err)
	}
	noJournal(t, s)
}

// TestRollForward: a rename that fails half-way (copies refused after a few)
// leaves its journal; Recover — or the next operation on an overlapping
// folder — finishes it.
func TestRollForward(t *testing.T) {
	for _, viaNextOp := range []bool{false, true} {
		t.Run(fmt.Sprint("viaNextOp=", viaNextOp), func(t *testing.T) {
			inner := mem.Open()
			var copies atomic.Int64
			fb := faulty.New(inner.Backend(), &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
				if op == faulty.OpCopy && copies.Add(1) > 7 {
					return faulty.Fail, 0
				}
				return faulty.None, 0
			}})
			s := objstore.New(fb, nil)
			locks := folder.LocalLocker{L: &pathlock.Locker{}}
			ops := folder.New(s, &folder.Options{Locker: locks, Concurrency: 2, ChunkSize: 4})
			want := fill(t, inner, "src/", 3)
			if _, err := ops.Rename(context.Background(), "src/", "dst/", false); err == nil {
				t.Fatal("the injected copy failure did not surface")
			}
			copies.Store(-1 << 40) // the store works again
			healthy := folder.New(inner, &folder.Options{Locker: locks})
			if viaNextOp {
				var out bytes.Buffer
				res, err := healthy.Snapshot(context.Background(), "dst/", &out)
				if err != nil || res.Recovered != 1 || res.Objects != int64(len(want)) {
					t.Fatalf("snapshot after the crash: %+v %v (it must finish the rename first)", res, err)
				}
			} else {
				rep, err := healthy.Recover(context.Background())
				if err != nil || len(rep.Finished) != 1 {
					t.Fatalf("recover: %+v %v", rep, err)
				}
				if rep, err := healthy.Recover(context.Background()); err != nil || len(rep.Finished) != 0 {
					t.Fatalf("second recover: %+v %v", rep, err)
				}
			}
			if got := contents(t, inner, "dst/"); !equal(got, want) {
				t.Fatalf("after roll-forward: %d objects at dst, want %d", len(got), len(want))
			}
			if left := contents(t, inner, "src/"); len(left) != 0 {
				t.Fatalf("%d sources left", len(left))
			}
			noJournal(t, inner)
		})
	}
}

// TestChangedAfterManifest: an object overwritten while the rename runs is
// neither moved nor deleted; the rename reports it and finishes the rest.
func TestChangedAfterManifest(t *testing.T) {
	s := mem.Open()
	ctx := context.Background()
	want := fill(t, s, "src/", 2)
	var once atomic.Bool
	ops := folder.New(s, &folder.Options{Locker: folder.LocalLocker{L: &pathlock.Locker{}}, Concurrency: 1,
		Progress: func(p folder.Progress) {
			if p.Phase == "copy" && once.CompareAndSwap(false, true) {
				// A writer that bypasses cairn overwrites the last key.
				if _, err := s.PutBytes(ctx, "src/1-x", []byte("rogue"), nil); err != nil {
					t.Error(err)
				}
			}
		}})
	_, err := ops.Rename(ctx, "src/", "dst/", false)
	var ce *folder.ConflictError
	if !errors.As(err, &ce) || ce.N != 1 || ce.Keys[0] != "src/1-x" {
		t.Fatalf("rename with a rogue overwrite: %v, want a conflict on src/1-x", err)
	}
	if data, _, err := s.GetBytes(ctx, "src/1-x"); err != nil || string(data) != "rogue" {
		t.Fatalf("the changed object was not left alone: %q %v", data, err)
	}
	got := map[string][32]byte{}
	for info, err := range s.List(ctx, "dst/", nil) {
		if err != nil {
			t.Fatal(err)
		}
		data, _, _ := s.GetBytes(ctx, info.Key)
		got[info.Key[4:]] = sha256.Sum256(data)
	}
	delete(want, "1-x")
	if !equal(got, want) {
		t.Fatalf("the rest was not renamed: %d of %d", len(got), len(want))
	}
	noJournal(t, s)
}

// journalVanishes deletes every journal object just before the second read
// of an intent: another process finishing its operation between this one's
// listing (which read the intent) and its reading the intent again.
type journalVanishes struct {
	objstore.Backend
	inner *objstore.Store
	reads atomic.Int64
}

func (j *journalVanishes) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	if strings.HasPrefix(key, folder.JournalPrefix) && strings.HasSuffix(key, "/intent.json") && j.reads.Add(1) == 2 {
		infos, _ := j.inner.ListAll(ctx, folder.JournalPrefix, nil)
		for _, in := range infos {
			_ = j.inner.Delete(ctx, in.Key, objstore.Condition{})
		}
	}
	return j.Backend.Get(ctx, key)
}

// An overlapping operation whose journal disappears between the listing and
// the read (its own process finished it) is not an error: seen once in CI as
// `cairn fs cp` failing with "intent.json: not found".
func TestJournalFinishedWhileListing(t *testing.T) {
	inner := mem.Open()
	var copies atomic.Int64
	fb := faulty.New(inner.Backend(), &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpCopy && copies.Add(1) > 3 {
			return faulty.Fail, 0
		}
		return faulty.None, 0
	}})
	locks := folder.LocalLocker{L: &pathlock.Locker{}}
	fill(t, inner, "src/", 2)
	if _, err := folder.New(objstore.New(fb, nil), &folder.Options{Locker: locks, Concurrency: 1}).Rename(context.Background(), "src/", "dst/", false); err == nil {
		t.Fatal("the injected copy failure did not surface")
	}
	s := objstore.New(&journalVanishes{Backend: inner.Backend(), inner: inner}, nil)
	var out bytes.Buffer
	if _, err := folder.New(s, &folder.Options{Locker: locks}).Snapshot(context.Background(), "dst/", &out); err != nil {
		t.Fatalf("snapshot while the overlapping journal vanished: %v", err)
	}
}
