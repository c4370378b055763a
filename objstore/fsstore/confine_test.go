package fsstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// secret is in every file outside the store's root: no operation of the
// store may ever return it.
const secret = "CANARY-outside-the-root-7f3a"

// TestNeverOutsideRoot is a property test of the directory store's lowest
// layer: whatever key the Backend is given (here directly, without the
// Store's key rules in front of it) — "..", ".", "%2E%2E", "//", leading and
// trailing "/", backslashes, unicode, control characters, 1,024 bytes — and
// whatever symbolic links the tree holds (to directories and files outside,
// relative and absolute, in key paths and in the store's own .cairn/
// bookkeeping, and a directory swapped for such a link while operations
// run), no operation creates, changes, removes or reads anything outside the
// root. Outside is a tree around the root, hashed (names, modes, link
// targets, contents) before and after; and every file there holds a secret
// that no Get, Head, List or Copy may return. A key that is not a clean
// relative path is refused by the Backend itself with ErrInvalidKey.
func TestNeverOutsideRoot(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	// base/outside/… and base/canary are outside; the root is five levels
	// down, so keys climbing up to five levels land in the hashed tree.
	base := t.TempDir()
	root := filepath.Join(base, "l1", "l2", "l3", "l4", "root")
	outside := filepath.Join(base, "outside")
	mustWrite := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(secret+" "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"x", "k", "ünï", "a b", "sub/x", "sub/k", "deep/er/x", ".cairn/tmp/x"} {
		mustWrite(filepath.Join(outside, name))
	}
	for d := root; d != base; d = filepath.Dir(d) {
		mustWrite(filepath.Join(filepath.Dir(d), "canary-"+filepath.Base(d)))
		mustWrite(filepath.Join(filepath.Dir(d), "x"))
	}

	b, err := fsstore.OpenBackend(root, &fsstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()

	// Links inside the root that lead outside, and one that stays inside.
	links := map[string]string{
		"link-dir":         outside,
		"link-file":        filepath.Join(outside, "x"),
		"rel-up":           "../../../../../outside",
		"sub/up":           "../../../../../../outside/sub",
		"abs":              base,
		"inner":            "sub",
		".cairn/tmp-evil":  outside,
		"nested/.cairn":    outside,
		"swap/placeholder": "",
	}
	for name, target := range links {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A quarter of the store's metadata folders and lock stripes lead outside:
	// sidecar writes and key locks go through them.
	for i := 0; i < 256; i += 4 {
		meta := filepath.Join(root, ".cairn", "meta", fmt.Sprintf("%02x", i))
		if err := os.RemoveAll(meta); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, meta); err != nil {
			t.Fatal(err)
		}
		lock := filepath.Join(root, ".cairn", "locks", fmt.Sprintf("%02x", i))
		if _, err := os.Lstat(lock); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join(outside, "x"), lock); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := hashOutside(t, base, root)

	// A directory in key paths swapped for a link outside and back, while
	// the operations run.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		swap, real := filepath.Join(root, "swap"), filepath.Join(root, "swap-real")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				if os.Rename(swap, real) == nil {
					_ = os.Symlink(outside, swap)
				}
			} else {
				_ = os.Remove(swap) // the link (or a folder a Delete emptied)
				_ = os.Rename(real, swap)
				_ = os.MkdirAll(swap, 0o755)
			}
			time.Sleep(50 * time.Microsecond) // leave the CPU to the operations
		}
	})

	keys := confineKeys(rng, 400)
	for _, k := range keys {
		for _, err := range confineOps(ctx, t, b, k) {
			if err != nil && !clean(k) && !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("key %q (not a clean relative path): %v; want ErrInvalidKey", k, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if _, err := b.RemoveStale(); err != nil {
		t.Errorf("RemoveStale: %v", err)
	}
	if after := hashOutside(t, base, root); after != before {
		t.Errorf("the tree outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// clean reports whether k is a relative path with no empty, "." or ".."
// segment and no NUL: the keys a directory store can hold as they are.
func clean(k string) bool {
	if k == "" || strings.HasPrefix(k, "/") || strings.ContainsRune(k, 0) {
		return false
	}
	for _, seg := range strings.Split(k, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// confineKeys generates n keys from segments chosen to escape, confuse or
// stretch a directory store, plus fixed ones every run tries.
func confineKeys(rng *rand.Rand, n int) []string {
	segs := []string{"..", "..", ".", "", "%2E%2E", "..%2F..%2Fx", `..\..\x`, `..\`, "x", "k", "sub", "link-dir",
		"link-file", "rel-up", "abs", "inner", "swap", "nested", ".cairn", ".cairn-not", "tmp", "meta", "ünï", "日本",
		"a b", "#frag", "?q=1", "\x01", "\x1f", "\x7f", "\t", "\n", strings.Repeat("s", 255), strings.Repeat("é", 128)}
	keys := []string{"../x", "../../../../../outside/x", "link-dir/x", "link-dir/new", "link-file", "rel-up/x",
		"rel-up/new", "sub/up/x", "abs/outside/x", "abs/new", "inner/x", "swap/x", "swap/new", "nested/.cairn/x",
		".cairn/tmp-evil/x", "x/..", "x/../../x", "/x", "//x", "./x", "x/", "x//k", "..", ".", "",
		"a\x00b", strings.Repeat("a/", 511) + "z", strings.Repeat("../", 341) + "x"}
	for len(keys) < n {
		var b strings.Builder
		for i := rng.IntN(5); i >= 0; i-- {
			b.WriteString(segs[rng.IntN(len(segs))])
			if i > 0 || rng.IntN(6) == 0 {
				b.WriteByte('/')
			}
		}
		if rng.IntN(8) == 0 {
			b.WriteString(strings.Repeat("y", max(0, objstore.MaxKeyLen-b.Len())))
		}
		keys = append(keys, b.String())
	}
	return keys
}

// confineOps runs every operation of the Backend on key k (and k with a
// plain key on the other side of a copy) and returns their errors; it
// fails the test if any returns the secret.
func confineOps(ctx context.Context, t *testing.T, b *fsstore.Backend, k string) []error {
	t.Helper()
	var errs []error
	note := func(what string, data []byte, info objstore.Info, err error) {
		if bytes.Contains(data, []byte(secret)) || strings.Contains(fmt.Sprint(info), secret) {
			t.Errorf("%s %q returned a file from outside the root", what, k)
		}
		errs = append(errs, err)
	}
	get := func(key string) {
		rc, info, err := b.Get(ctx, key)
		var data []byte
		if err == nil {
			data, _ = io.ReadAll(rc)
			rc.Close()
		}
		note("get", data, info, err)
	}
	get(k)
	info, err := b.Head(ctx, k)
	note("head", nil, info, err)
	page, err := b.List(ctx, k, "", objstore.ListOptions{})
	for _, e := range page.Entries {
		// A listed key may be gone, or lead through the swapped link, by
		// the time it is read: only what it returns is judged here (its
		// error belongs to that key, not to k).
		rc, info, err := b.Get(ctx, e.Key)
		var data []byte
		if err == nil {
			data, _ = io.ReadAll(rc)
			rc.Close()
		}
		if bytes.Contains(data, []byte(secret)) || strings.Contains(fmt.Sprint(info), secret) {
			t.Errorf("get of listed %q returned a file from outside the root", e.Key)
		}
	}
	note("list", nil, objstore.Info{}, err)
	info, err = b.Put(ctx, k, strings.NewReader("inside"), 6, objstore.PutOptions{})
	note("put", nil, info, err)
	info, err = b.Put(ctx, k, strings.NewReader("inside"), 6, objstore.PutOptions{If: objstore.IfAbsent()})
	note("put if absent", nil, info, ignore(err, objstore.ErrPreconditionFailed))
	get(k)
	info, err = b.Copy(ctx, k, "copied", objstore.Condition{})
	note("copy from", nil, info, ignore(err, objstore.ErrNotFound))
	if _, err := b.Put(ctx, "plain", strings.NewReader("plain"), 5, objstore.PutOptions{}); err != nil {
		t.Fatalf("put plain: %v", err)
	}
	info, err = b.Copy(ctx, "plain", k, objstore.Condition{})
	note("copy to", nil, info, err)
	if id, err := b.CreateMultipart(ctx, k, objstore.PutOptions{}); err != nil {
		errs = append(errs, err)
	} else {
		p, err := b.UploadPart(ctx, k, id, 1, strings.NewReader("part"), 4)
		if err == nil {
			info, err = b.CompleteMultipart(ctx, k, id, []objstore.Part{p}, objstore.Condition{})
			note("complete", nil, info, err)
		}
		if err != nil {
			errs = append(errs, err, ignore(b.AbortMultipart(ctx, k, id), objstore.ErrNotFound))
		}
	}
	if id, err := b.CreateMultipart(ctx, k, objstore.PutOptions{}); err == nil {
		errs = append(errs, b.AbortMultipart(ctx, k, id))
	}
	errs = append(errs, ignore(b.Delete(ctx, k, objstore.IfMatch("0123")), objstore.ErrNotFound, objstore.ErrPreconditionFailed))
	errs = append(errs, b.Delete(ctx, k, objstore.Condition{}))
	return errs
}

func ignore(err error, kinds ...error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return nil
		}
	}
	return err
}

// hashOutside describes every entry under base except the root's subtree:
// path, type, mode, link target and a hash of the contents.
func hashOutside(t *testing.T, base, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s", strings.TrimPrefix(p, base), fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", target)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			fmt.Fprintf(&b, " %s", hex.EncodeToString(sum[:8]))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A clean key whose path leads out of the root through a symbolic link is
// refused as an invalid key, saying why, by every operation.
func TestSymlinkOutOfRootIsInvalidKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "x"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := fsstore.OpenBackend(filepath.Join(base, "root"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := os.Symlink(outside, filepath.Join(base, "root", "out")); err != nil {
		t.Fatal(err)
	}
	s := objstore.New(b, nil)
	_, _, getErr := s.Get(ctx, "out/x")
	_, putErr := s.PutBytes(ctx, "out/x", []byte("in"), nil)
	for name, err := range map[string]error{
		"get":    getErr,
		"put":    putErr,
		"delete": s.Delete(ctx, "out/x", objstore.Condition{}),
	} {
		if !errors.Is(err, objstore.ErrInvalidKey) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s out/x: %v; want ErrInvalidKey naming the symbolic link", name, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(outside, "x")); err != nil || string(data) != secret {
		t.Errorf("outside/x is now %q, %v", data, err)
	}
}
