// Package objstoretest is the conformance suite every objstore backend and
// wrapper must pass: call Run from the backend's tests with a Harness. It checks
// reads, writes, conditions (or that the Store refuses conditions the endpoint
// does not enforce), listing order and paging, odd keys, multipart uploads with
// conditional completion, the probe, and contention: goroutines and — for stores
// reachable by URL — OS processes racing write-once creates (exactly one winner)
// and compare-and-swap increments (no lost update).
//
// Process tests re-execute the test binary; its TestMain must call MaybeChild
// first.
package objstoretest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// Instance is a fresh, empty store made for one test.
type Instance struct {
	Store *objstore.Store
	// URL opens the same store from another process ("" skips process tests).
	URL string
	// Env is extra environment those processes need (e.g. credentials).
	Env []string
	// Uploads, if set, counts multipart uploads in progress (to check aborts).
	Uploads func() int
	// Declared, if set, is what the test knows this server enforces (measured
	// and recorded for a pinned server version): the probe must find exactly
	// that. Backends that declare their own capabilities need not set it.
	Declared *objstore.Capabilities
	// MangledListings, if set, says why this server cannot list keys holding
	// control characters XML cannot carry (it ignores encoding-type=url): its
	// listings of such keys must then fail with objstore.ErrNotSupported,
	// never yield wrong names. Default "": listings are byte-exact.
	MangledListings string
	// RawTokens, if set, says why this server's paged listings cannot end a
	// page on a key holding a control character (it writes the key raw into
	// the continuation token, which no XML parser reads): such a listing must
	// fail with ErrNotSupported saying so.
	RawTokens string
}

// Harness makes stores for the suite.
type Harness struct {
	// New returns a fresh, empty store; register its cleanup on t.
	New func(t *testing.T) Instance
	// Processes is how many OS processes race in process tests. Default: 4.
	Processes int
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.Processes == 0 {
		h.Processes = 4
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Instance)
	}{
		{"PutGetHead", testPutGetHead},
		{"NotFound", testNotFound},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfMatch", testPutIfMatch},
		{"DeleteIfMatch", testDeleteIfMatch},
		{"Copy", testCopy},
		{"DeleteMany", testDeleteMany},
		{"List", testList},
		{"ListPaging", testListPaging},
		{"OddKeys", testOddKeys},
		{"ControlCharacterKeys", testControlCharacterKeys},
		{"ObjectAndFolder", testObjectAndFolder},
		{"InvalidKeys", testInvalidKeys},
		{"Upload", testUpload},
		{"UploadConditional", testUploadConditional},
		{"ContextCanceled", testContextCanceled},
		{"Probe", testProbe},
		{"RacingCreates", testRacingCreates},
		{"CASIncrements", testCASIncrements},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h.New(t))
		})
	}
	t.Run("Processes", func(t *testing.T) {
		t.Parallel()
		in := h.New(t)
		if in.URL == "" {
			t.Skip("this store cannot be opened from another process (no URL)")
		}
		t.Run("RacingCreates", func(t *testing.T) { testProcessRace(t, in, h.Processes) })
		t.Run("CASIncrements", func(t *testing.T) { testProcessCAS(t, in, h.Processes) })
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func mustGet(t *testing.T, ctx context.Context, s *objstore.Store, key string) ([]byte, objstore.Info) {
	t.Helper()
	data, info, err := s.GetBytes(ctx, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return data, info
}

func mustPut(t *testing.T, ctx context.Context, s *objstore.Store, key, body string, o *objstore.PutOptions) objstore.Info {
	t.Helper()
	info, err := s.PutBytes(ctx, key, []byte(body), o)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return info
}

func testPutGetHead(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	body := "hello, cairn"
	md := map[string]string{"Owner": "team-a", "x-trace": "abc 123"}
	pi := mustPut(t, ctx, s, "dir/hello.txt", body, &objstore.PutOptions{ContentType: "text/plain", Metadata: md})
	if pi.ETag != md5hex([]byte(body)) {
		t.Errorf("put ETag = %q, want the MD5 %q", pi.ETag, md5hex([]byte(body)))
	}
	data, gi := mustGet(t, ctx, s, "dir/hello.txt")
	if string(data) != body {
		t.Errorf("get = %q, want %q", data, body)
	}
	hi, err := s.Head(ctx, "dir/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []objstore.Info{gi, hi} {
		if i.Key != "dir/hello.txt" || i.Size != int64(len(body)) || i.ETag != pi.ETag {
			t.Errorf("info = %+v, want key, size %d, etag %s", i, len(body), pi.ETag)
		}
		if i.ContentType != "text/plain" {
			t.Errorf("content type = %q, want text/plain", i.ContentType)
		}
		if i.Metadata["owner"] != "team-a" || i.Metadata["x-trace"] != "abc 123" {
			t.Errorf("metadata = %v, want lowercase keys owner and x-trace", i.Metadata)
		}
		if i.LastModified.IsZero() || time.Since(i.LastModified) > time.Hour {
			t.Errorf("last modified = %v", i.LastModified)
		}
	}
	// Overwrite changes the ETag; empty objects work.
	pi2 := mustPut(t, ctx, s, "dir/hello.txt", "", nil)
	if pi2.ETag == pi.ETag || pi2.ETag != md5hex(nil) {
		t.Errorf("ETag after overwrite with empty = %q, want %q", pi2.ETag, md5hex(nil))
	}
	if data, _ := mustGet(t, ctx, s, "dir/hello.txt"); len(data) != 0 {
		t.Errorf("get after empty overwrite = %q", data)
	}
	if err := s.Delete(ctx, "dir/hello.txt", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, "dir/hello.txt"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("head after delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "dir/hello.txt", objstore.Condition{}); err != nil {
		t.Errorf("deleting a missing key: %v, want nil (S3 semantics)", err)
	}
}

func testNotFound(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	if _, _, err := s.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Head(ctx, "missing/deeper"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("head missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Copy(ctx, "missing", "dst", objstore.Condition{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("copy from missing: %v, want ErrNotFound", err)
	}
	mustPut(t, ctx, s, "a/b", "x", nil)
	if _, err := s.Head(ctx, "a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("head of a folder: %v, want ErrNotFound", err)
	}
}

// needPut skips a test of conditional PUTs on a store that does not enforce
// them, after checking that Store refuses them there (ErrNotSupported, nothing
// written) instead of writing unconditionally.
func needPut(t *testing.T, ctx context.Context, s *objstore.Store, absent bool) {
	t.Helper()
	caps, err := s.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cond, has := objstore.IfMatch("0123456789abcdef0123456789abcdef"), caps.PutIfMatch
	if absent {
		cond, has = objstore.IfAbsent(), caps.PutIfAbsent
	}
	if has {
		return
	}
	if _, err := s.PutBytes(ctx, "unenforced", []byte("x"), &objstore.PutOptions{If: cond}); !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("put %s on a store that does not enforce it: %v, want ErrNotSupported", cond, err)
	}
	if _, err := s.Head(ctx, "unenforced"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused conditional put wrote the object (head: %v)", err)
	}
	t.Skipf("the store does not enforce put %s (probe); checked that Store refuses it", cond)
}

func testPutIfAbsent(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	needPut(t, ctx, s, true)
	first := mustPut(t, ctx, s, "once", "first", &objstore.PutOptions{If: objstore.IfAbsent()})
	_, err := s.PutBytes(ctx, "once", []byte("second"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second if-absent put: %v, want ErrPreconditionFailed", err)
	}
	if data, info := mustGet(t, ctx, s, "once"); string(data) != "first" || info.ETag != first.ETag {
		t.Errorf("after refused write: %q %s, want first %s", data, info.ETag, first.ETag)
	}
}

func testPutIfMatch(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	needPut(t, ctx, s, false)
	v1 := mustPut(t, ctx, s, "cas", "v1", nil)
	_, err := s.PutBytes(ctx, "cas", []byte("bad"), &objstore.PutOptions{If: objstore.IfMatch("0123456789abcdef0123456789abcdef")})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("put with wrong if-match: %v, want ErrPreconditionFailed", err)
	}
	v2 := mustPut(t, ctx, s, "cas", "v2", &objstore.PutOptions{If: objstore.IfMatch(`"` + v1.ETag + `"`)}) // quoted ETags are accepted
	if _, err := s.PutBytes(ctx, "cas", []byte("v3"), &objstore.PutOptions{If: objstore.IfMatch(v1.ETag)}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("put with stale if-match: %v, want ErrPreconditionFailed", err)
	}
	if data, info := mustGet(t, ctx, s, "cas"); string(data) != "v2" || info.ETag != v2.ETag {
		t.Errorf("got %q %s, want v2 %s", data, info.ETag, v2.ETag)
	}
	_, err = s.PutBytes(ctx, "cas-missing", []byte("x"), &objstore.PutOptions{If: objstore.IfMatch(v1.ETag)})
	if !errors.Is(err, objstore.ErrPreconditionFailed) && !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("if-match on a missing key: %v, want ErrPreconditionFailed or ErrNotFound", err)
	}
	if _, err := s.Head(ctx, "cas-missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("if-match on a missing key created it (head: %v)", err)
	}
	if _, err := s.PutBytes(ctx, "both", nil, &objstore.PutOptions{If: objstore.Condition{Absent: true, Match: v1.ETag}}); !errors.Is(err, objstore.ErrNotSupported) {
		t.Errorf("if-absent with if-match: %v, want ErrNotSupported", err)
	}
}

func testDeleteIfMatch(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	caps, err := s.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, ctx, s, "del", "x", nil)
	err = s.Delete(ctx, "del", objstore.IfMatch("0123456789abcdef0123456789abcdef"))
	if !caps.DeleteIfMatch {
		if !errors.Is(err, objstore.ErrNotSupported) {
			t.Fatalf("delete if-match on a store that does not enforce it: %v, want ErrNotSupported", err)
		}
		if _, err := s.Head(ctx, "del"); err != nil {
			t.Fatalf("a refused conditional delete removed the object: %v", err)
		}
		t.Log("the store does not enforce delete if-match; checked that Store refuses it")
		return
	}
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("delete with wrong if-match: %v, want ErrPreconditionFailed", err)
	}
	if _, err := s.Head(ctx, "del"); err != nil {
		t.Fatalf("object gone after refused delete: %v", err)
	}
	if err := s.Delete(ctx, "del", objstore.IfMatch(v.ETag)); err != nil {
		t.Fatalf("delete with right if-match: %v", err)
	}
	// A quirk, not a failure: AWS and MinIO answer 404, versitygw 204. Either
	// way nothing was deleted, which is all a caller may rely on.
	if err := s.Delete(ctx, "del", objstore.IfMatch(v.ETag)); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("conditional delete of a missing key: %v, want ErrNotFound or nil", err)
	}
}

func testCopy(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	src := mustPut(t, ctx, s, "src/ünï + %.txt", "copy me", &objstore.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"k": "v"}})
	ci, err := s.Copy(ctx, "src/ünï + %.txt", "dst/copy.txt", objstore.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	data, gi := mustGet(t, ctx, s, "dst/copy.txt")
	if string(data) != "copy me" || gi.ETag != src.ETag || ci.ETag != src.ETag {
		t.Errorf("copy: %q etag %s/%s, want %q %s", data, gi.ETag, ci.ETag, "copy me", src.ETag)
	}
	if gi.Metadata["k"] != "v" || gi.ContentType != "text/plain" {
		t.Errorf("copy lost metadata: %v %q", gi.Metadata, gi.ContentType)
	}
	caps, err := s.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Copy(ctx, "src/ünï + %.txt", "dst/copy.txt", objstore.IfAbsent())
	switch {
	case !caps.CopyIfAbsent && !errors.Is(err, objstore.ErrNotSupported):
		t.Errorf("copy if-absent on a store that ignores it: %v, want ErrNotSupported", err)
	case caps.CopyIfAbsent && !errors.Is(err, objstore.ErrPreconditionFailed):
		t.Errorf("copy if-absent onto an existing key: %v, want ErrPreconditionFailed", err)
	}
	if caps.CopyIfAbsent {
		if _, err := s.Copy(ctx, "src/ünï + %.txt", "dst/new.txt", objstore.IfAbsent()); err != nil {
			t.Errorf("copy if-absent to a free key: %v", err)
		}
	}
}

// orderedKeys are chosen so that byte order differs from naive folder-walk order.
// (a folder "a" must sort as "a/": after "a.b", before "a0").
func testDeleteMany(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	var keys []string
	for i := range 25 {
		k := fmt.Sprintf("many/ünï %02d+.txt", i)
		mustPut(t, ctx, s, k, "x", nil)
		keys = append(keys, k)
	}
	mustPut(t, ctx, s, "many-keep", "keep", nil)
	failed, err := s.DeleteMany(ctx, append(keys, "many/never-existed"), 4)
	if err != nil || len(failed) != 0 {
		t.Fatalf("DeleteMany: %v %v", failed, err)
	}
	left, err := s.ListAll(ctx, "many", nil)
	if err != nil || len(left) != 1 || left[0].Key != "many-keep" {
		t.Fatalf("after DeleteMany: %v %v", left, err)
	}
	if _, err := s.DeleteMany(ctx, []string{"ok", "a//b"}, 1); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("DeleteMany with an invalid key: %v", err)
	}
}

var orderedKeys = []string{"a b", "a+b", "a-b", "a.b", "a/b", "a/b0", "a/c/d", "a0", "b/é", "b/z", "c", "z", "é", "日本/語"}

func putAll(t *testing.T, ctx context.Context, s *objstore.Store, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := s.PutBytes(ctx, k, []byte(k), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func keysOf(t *testing.T, s *objstore.Store, ctx context.Context, prefix string, o *objstore.ListOptions) []string {
	t.Helper()
	var out []string
	for info, err := range s.List(ctx, prefix, o) {
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		if info.IsPrefix {
			out = append(out, info.Key+"(prefix)")
		} else {
			out = append(out, info.Key)
		}
	}
	return out
}

func testList(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	keys := orderedKeys
	putAll(t, ctx, s, keys)
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := keysOf(t, s, ctx, "", nil); !slices.Equal(got, want) {
		t.Errorf("list all:\n got %q\nwant %q", got, want)
	}
	var withA []string
	for _, k := range want {
		if strings.HasPrefix(k, "a/") {
			withA = append(withA, k)
		}
	}
	if got := keysOf(t, s, ctx, "a/", nil); !slices.Equal(got, withA) {
		t.Errorf("list a/: got %q want %q", got, withA)
	}
	var after []string
	for _, k := range want {
		if k > "a/b" {
			after = append(after, k)
		}
	}
	if got := keysOf(t, s, ctx, "", &objstore.ListOptions{StartAfter: "a/b"}); !slices.Equal(got, after) {
		t.Errorf("list after a/b: got %q want %q", got, after)
	}
	// Delimiter roll-up, as S3 does it.
	var rolled []string
	seen := map[string]bool{}
	for _, k := range want {
		if i := strings.Index(k, "/"); i >= 0 {
			p := k[:i+1] + "(prefix)"
			if !seen[p] {
				seen[p] = true
				rolled = append(rolled, p)
			}
			continue
		}
		rolled = append(rolled, k)
	}
	if got := keysOf(t, s, ctx, "", &objstore.ListOptions{Delimiter: "/"}); !slices.Equal(got, rolled) {
		t.Errorf("list with delimiter:\n got %q\nwant %q", got, rolled)
	}
	if got := keysOf(t, s, ctx, "", &objstore.ListOptions{Delimiter: "/", PageSize: 1}); !slices.Equal(got, rolled) {
		t.Errorf("list with delimiter, pages of 1:\n got %q\nwant %q", got, rolled)
	}
	// Start-after inside a common prefix: the prefix sorts before start-after,
	// so neither it nor the keys under it are returned (as S3 and MinIO do).
	var wantMid []string
	for _, k := range rolled {
		if k > "a/c" && !strings.HasPrefix(k, "a/") {
			wantMid = append(wantMid, k)
		}
	}
	if got := keysOf(t, s, ctx, "", &objstore.ListOptions{Delimiter: "/", StartAfter: "a/b0"}); !slices.Equal(got, wantMid) {
		t.Errorf("list with delimiter after a/b0:\n got %q\nwant %q", got, wantMid)
	}
	if got := keysOf(t, s, ctx, "nothing-here/", nil); len(got) != 0 {
		t.Errorf("list of an empty prefix: %q", got)
	}
	// Early break stops the iteration without error.
	n := 0
	for _, err := range s.List(ctx, "", &objstore.ListOptions{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 3 {
			break
		}
	}
}

func testListPaging(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	var keys []string
	for i := range 57 {
		keys = append(keys, fmt.Sprintf("p/%03d/obj", i))
	}
	putAll(t, ctx, s, keys)
	got := keysOf(t, s, ctx, "p/", &objstore.ListOptions{PageSize: 10})
	if !slices.Equal(got, keys) {
		t.Errorf("paged list: got %d keys, want %d in order", len(got), len(keys))
	}
	infos, err := s.ListAll(ctx, "p/", &objstore.ListOptions{PageSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.ETag != md5hex([]byte(i.Key)) || i.Size != int64(len(i.Key)) {
			t.Fatalf("listing entry %+v: want ETag and size of the content", i)
		}
	}
}

// longKey is exactly MaxKeyLen bytes, in segments a filesystem can hold.
func longKey() string {
	return strings.Repeat(strings.Repeat("k", 200)+"/", 6)[:objstore.MaxKeyLen]
}

func testOddKeys(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	keys := []string{"with space.txt", "plus+sign", "percent%20sign", "per%cent", "ünïcødé/日本語/✓", "quote'\"<>&", "dir with space/+/%2F", "a=b&c=d?e#f", "emoji 🪨", "trailing.dot.", "~tilde", longKey()}
	for _, k := range keys {
		body := "body of " + k
		info, err := s.PutBytes(ctx, k, []byte(body), nil)
		if err != nil {
			t.Errorf("put %q: %v", k, err)
			continue
		}
		if info.Key != k {
			t.Errorf("put %q returned key %q", k, info.Key)
		}
		if data, _ := mustGet(t, ctx, s, k); string(data) != body {
			t.Errorf("get %q = %q", k, data)
		}
	}
	got := keysOf(t, s, ctx, "", nil)
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("list of odd keys:\n got %q\nwant %q", got, want)
	}
}

// controlKeys hold every kind of control character S3 stores in a key (C0
// including newline, tab and CR, ESC, DEL, C1), some sorting before "/" and
// so testing that listings keep UTF-8 byte order, and "\r\n", which an XML
// parser would turn into "\n".
var controlKeys = []string{"cc/new\nline", "cc/tab\tkey", "cc/cr\r\nlf", "cc/lone\rcr", "cc/a\x01", "cc/a/b", "cc/a\x1f", "cc/a0",
	"cc/esc\x1b]0;t\a\x1b[2J", "cc/del\x7f", "cc/c1\u0085\u009b2J", "cc/dir\n/x", "cc/dir\n/y\t", "cc/\x02lead", "cc/trail\x03"}

// testControlCharacterKeys: keys with control characters are objects like any
// other, byte-exact through every operation and listing.
func testControlCharacterKeys(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	putAll(t, ctx, s, controlKeys)
	for _, k := range controlKeys {
		data, info := mustGet(t, ctx, s, k)
		if string(data) != k || info.Key != k {
			t.Errorf("get %q = %q (key %q)", k, data, info.Key)
		}
		if hi, err := s.Head(ctx, k); err != nil || hi.Key != k || hi.Size != int64(len(k)) {
			t.Errorf("head %q: %+v %v", k, hi, err)
		}
	}
	if in.MangledListings != "" {
		for _, err := range s.List(ctx, "cc/", nil) {
			if !errors.Is(err, objstore.ErrNotSupported) || !strings.Contains(err.Error(), "U+FFFD") {
				t.Errorf("list on a server that mangles control characters: %v, want ErrNotSupported saying so", err)
			}
			break
		}
		t.Logf("listings of keys with control characters XML cannot carry are refused: %s", in.MangledListings)
	} else {
		listControlKeys(t, ctx, s, in.RawTokens)
	}
	// Tab, newline and CR are XML characters: every server lists them.
	if got := keysOf(t, s, ctx, "cc/dir\n/", nil); !slices.Equal(got, []string{"cc/dir\n/x", "cc/dir\n/y\t"}) {
		t.Errorf("list under a prefix with a newline: %q", got)
	}
	if got := keysOf(t, s, ctx, "cc/tab\t", nil); !slices.Equal(got, []string{"cc/tab\tkey"}) {
		t.Errorf("list under a prefix with a tab: %q", got)
	}
	if got := keysOf(t, s, ctx, "cc/cr\r", nil); !slices.Equal(got, []string{"cc/cr\r\nlf"}) {
		t.Errorf("list under a prefix with a CR: %q", got)
	}
	if _, err := s.Copy(ctx, "cc/new\nline", "cc/copy\tof\r\n", objstore.Condition{}); err != nil {
		t.Errorf("copy: %v", err)
	} else if data, _ := mustGet(t, ctx, s, "cc/copy\tof\r\n"); string(data) != "cc/new\nline" {
		t.Errorf("copy holds %q", data)
	}
	// Multipart: the answers to create and complete carry the key in XML.
	part := max(s.Backend().MinPartSize(), 1024)
	data := pattern(int(2*part + 7))
	const upKey = "cc/up\x01load\r\n\x1b.bin"
	if _, err := s.Upload(ctx, upKey, bytes.NewReader(data), &objstore.UploadOptions{PartSize: part, PutOptions: objstore.PutOptions{If: objstore.IfAbsent()}}); err != nil && !errors.Is(err, objstore.ErrNotSupported) {
		t.Errorf("multipart upload of %q: %v", upKey, err)
	} else if err == nil {
		if got, _ := mustGet(t, ctx, s, upKey); !bytes.Equal(got, data) {
			t.Errorf("multipart upload of %q holds %d bytes, want %d", upKey, len(got), len(data))
		}
		if err := s.Delete(ctx, upKey, objstore.Condition{}); err != nil {
			t.Errorf("delete %q: %v", upKey, err)
		}
	}
	if err := s.Delete(ctx, "cc/del\x7f", objstore.Condition{}); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, _, err := s.Get(ctx, "cc/del\x7f"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	failed, err := s.DeleteMany(ctx, append(slices.Clone(controlKeys), "cc/copy\tof\r\n"), 2)
	if err != nil || len(failed) != 0 {
		t.Fatalf("DeleteMany: %v %v", failed, err)
	}
	for _, k := range controlKeys {
		if _, err := s.Head(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("head %q after DeleteMany: %v, want ErrNotFound", k, err)
		}
	}
}

// listControlKeys checks listings of controlKeys: byte-exact names in UTF-8
// byte order, paged, after a start key, and rolled up by a delimiter.
// rawTokens (Instance.RawTokens) says why paged listings that end a page on
// such a key are refused instead.
func listControlKeys(t *testing.T, ctx context.Context, s *objstore.Store, rawTokens string) {
	want := slices.Clone(controlKeys)
	slices.Sort(want)
	if got := keysOf(t, s, ctx, "cc/", nil); !slices.Equal(got, want) {
		t.Errorf("list of control-character keys:\n got %q\nwant %q", got, want)
	}
	if rawTokens != "" {
		var err error
		for _, err = range s.List(ctx, "cc/", &objstore.ListOptions{PageSize: 2}) {
			if err != nil {
				break
			}
		}
		if !errors.Is(err, objstore.ErrNotSupported) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("paged list on a server that writes continuation tokens raw: %v, want ErrNotSupported saying so", err)
		}
		t.Logf("paged listings that end a page on a key with a control character are refused: %s", rawTokens)
	} else if got := keysOf(t, s, ctx, "cc/", &objstore.ListOptions{PageSize: 2}); !slices.Equal(got, want) {
		t.Errorf("paged list of control-character keys:\n got %q\nwant %q", got, want)
	}
	if rawTokens != "" {
		// The start key is echoed the same way.
		for _, err := range s.List(ctx, "cc/", &objstore.ListOptions{StartAfter: "cc/a\x01"}) {
			if err != nil && !errors.Is(err, objstore.ErrNotSupported) {
				t.Errorf("list after a key with a control character: %v, want ErrNotSupported or success", err)
			}
			break
		}
	} else if got := keysOf(t, s, ctx, "cc/", &objstore.ListOptions{StartAfter: "cc/a\x01"}); !slices.Equal(got, want[slices.Index(want, "cc/a\x01")+1:]) {
		t.Errorf("list after %q:\n got %q", "cc/a\x01", got)
	}
	wantDelim := []string{"cc/\x02lead", "cc/a\x01", "cc/a\x1f", "cc/a/(prefix)", "cc/a0", "cc/c1\u0085\u009b2J", "cc/cr\r\nlf", "cc/del\x7f",
		"cc/dir\n/(prefix)", "cc/esc\x1b]0;t\a\x1b[2J", "cc/lone\rcr", "cc/new\nline", "cc/tab\tkey", "cc/trail\x03"}
	if got := keysOf(t, s, ctx, "cc/", &objstore.ListOptions{Delimiter: "/"}); !slices.Equal(got, wantDelim) {
		t.Errorf("list with delimiter:\n got %q\nwant %q", got, wantDelim)
	}
}

// testObjectAndFolder: S3 lets "x" and "x/y" coexist; a directory store cannot.
// Either both work, or the second write fails with a clear ErrInvalidKey and
// nothing is lost.
func testObjectAndFolder(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	mustPut(t, ctx, s, "x/y", "child", nil)
	mustPut(t, ctx, s, "f", "file", nil)
	for _, k := range []string{"x", "f/g"} {
		_, err := s.PutBytes(ctx, k, []byte("both"), nil)
		if err != nil && (!errors.Is(err, objstore.ErrInvalidKey) || !strings.Contains(err.Error(), "folder")) {
			t.Errorf("put %q: %v; want success or ErrInvalidKey explaining the folder conflict", k, err)
		}
	}
	if data, _ := mustGet(t, ctx, s, "x/y"); string(data) != "child" {
		t.Errorf("x/y = %q", data)
	}
	if data, _ := mustGet(t, ctx, s, "f"); string(data) != "file" {
		t.Errorf("f = %q", data)
	}
}

func testInvalidKeys(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	bad := []string{"", "/abs", "a//b", "a/../b", "..", ".", "./a", "a/.", "a\x00b", "nul at end\x00", "dir/", string([]byte{0xff, 0xfe}), strings.Repeat("x", objstore.MaxKeyLen+1)}
	for _, k := range bad {
		_, err := s.PutBytes(ctx, k, []byte("x"), nil)
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		} else if !strings.Contains(err.Error(), "key") {
			t.Errorf("error for %q does not say what is wrong: %v", k, err)
		}
		if _, _, err := s.Get(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("get %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if got := keysOf(t, s, ctx, "", nil); len(got) != 0 {
		t.Errorf("invalid keys left objects: %q", got)
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func testUpload(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	part := s.Backend().MinPartSize()
	if part < 1024 {
		part = 1024 // keep parts meaningful on stores that accept tiny ones
	}
	data := pattern(int(2*part + 123))
	var last int64
	info, err := s.Upload(ctx, "big/object.bin", io.MultiReader(bytes.NewReader(data)), &objstore.UploadOptions{
		PartSize: part, Concurrency: 2, PutOptions: objstore.PutOptions{Metadata: map[string]string{"m": "1"}},
		Progress: func(n int64) { last = n }})
	if err != nil {
		t.Fatal(err)
	}
	// The S3 form ("-3") on most servers; the whole body's MD5 on servers
	// that store that (gofakes3). Either way the one a HEAD shows, below.
	if !strings.HasSuffix(info.ETag, "-3") && info.ETag != md5hex(data) {
		t.Errorf("multipart ETag = %q, want the S3 form ending in -3 or the body's MD5", info.ETag)
	}
	if last != int64(len(data)) {
		t.Errorf("progress ended at %d, want %d", last, len(data))
	}
	got, gi := mustGet(t, ctx, s, "big/object.bin")
	if !bytes.Equal(got, data) {
		t.Fatalf("multipart content differs (%d vs %d bytes)", len(got), len(data))
	}
	if gi.ETag != info.ETag || gi.Metadata["m"] != "1" {
		t.Errorf("get info %+v, want ETag %s and metadata", gi, info.ETag)
	}
	small, err := s.Upload(ctx, "small", strings.NewReader("tiny"), nil)
	if err != nil || small.ETag != md5hex([]byte("tiny")) {
		t.Errorf("small upload: %+v %v", small, err)
	}
}

func testUploadConditional(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	caps, err := s.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	part := max(s.Backend().MinPartSize(), 1024)
	data := pattern(int(part + 10))
	existing := mustPut(t, ctx, s, "mp", "existing", nil)
	_, err = s.Upload(ctx, "mp", bytes.NewReader(data), &objstore.UploadOptions{PartSize: part, PutOptions: objstore.PutOptions{If: objstore.IfAbsent()}})
	if !caps.MultipartIfAbsent && !caps.PutIfAbsent {
		if !errors.Is(err, objstore.ErrNotSupported) {
			t.Fatalf("conditional multipart on a store that ignores it: %v, want ErrNotSupported", err)
		}
		return
	}
	// A store that enforces the condition on a PUT but not on a multipart
	// completion gets one conditional PUT of the whole body instead.
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("if-absent multipart upload onto an existing key: %v, want ErrPreconditionFailed", err)
	}
	if in.Uploads != nil {
		if n := in.Uploads(); n != 0 {
			t.Errorf("%d multipart uploads left after a failed completion; want them aborted", n)
		}
	}
	if _, info := mustGet(t, ctx, s, "mp"); info.ETag != existing.ETag {
		t.Errorf("refused upload changed the object")
	}
	info, err := s.Upload(ctx, "mp", bytes.NewReader(data), &objstore.UploadOptions{PartSize: part, PutOptions: objstore.PutOptions{If: objstore.IfMatch(existing.ETag)}})
	if err != nil {
		t.Fatalf("if-match multipart upload with the current ETag: %v", err)
	}
	if got, _ := mustGet(t, ctx, s, "mp"); !bytes.Equal(got, data) {
		t.Error("conditional multipart content differs")
	}
	_, err = s.Upload(ctx, "mp", bytes.NewReader(data), &objstore.UploadOptions{PartSize: part, PutOptions: objstore.PutOptions{If: objstore.IfMatch(existing.ETag)}})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Errorf("if-match multipart upload with a stale ETag: %v, want ErrPreconditionFailed (current %s)", err, info.ETag)
	}
}

func testContextCanceled(t *testing.T, in Instance) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := in.Store
	if _, err := s.PutBytes(ctx, "c", []byte("x"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("put with a cancelled context: %v, want context.Canceled", err)
	}
	if _, _, err := s.Get(ctx, "c"); !errors.Is(err, context.Canceled) {
		t.Errorf("get with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Head(context.Background(), "c"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("a cancelled put left an object: %v", err)
	}
}

func testProbe(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	declared, known := s.Backend().Capabilities()
	if in.Declared != nil {
		declared, known = *in.Declared, true
	}
	rep, err := objstore.Probe(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		t.Logf("%-20s enforced=%-5v %s (%v)", c.Name, c.Enforced, c.Outcome, c.Elapsed.Round(time.Microsecond))
	}
	if known && rep.Capabilities != declared {
		t.Errorf("probe found %+v, but the backend declares %+v", rep.Capabilities, declared)
	}
	if rep.Capabilities.PutIfAbsent && rep.Winners != 1 {
		t.Errorf("put-if-absent reported enforced with %d racing winners", rep.Winners)
	}
	if got := keysOf(t, s, ctx, "", nil); len(got) != 0 {
		t.Errorf("probe left scratch objects: %q", got)
	}
}

func testRacingCreates(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	needPut(t, ctx, s, true)
	const n = 32
	for round := range 3 {
		key := fmt.Sprintf("race/%d", round)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.PutBytes(ctx, key, []byte(strconv.Itoa(i)), &objstore.PutOptions{If: objstore.IfAbsent()})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both created the key", round, winner, i)
				}
				winner = i
			case errors.Is(err, objstore.ErrPreconditionFailed), errors.Is(err, objstore.ErrConflict):
			default:
				t.Fatalf("round %d: racer %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won", round)
		}
		if data, _ := mustGet(t, ctx, s, key); string(data) != strconv.Itoa(winner) {
			t.Fatalf("round %d: stored %q, but racer %d won", round, data, winner)
		}
	}
}

// increment adds one to the counter at key by compare-and-swap. The counter
// is "N nonce nonce…": the value, then the nonces of the last writes (the
// newest first). A write whose outcome is unknown (ErrAmbiguous: a lost
// response, or Ceph RGW's 500 to a racing If-Match loser) is resolved as
// cairn resolves one: read back, and it was applied if its nonce is there.
// The server answered or the connection ended before the read, so a write
// that never shows is not applied: it is retried.
func increment(ctx context.Context, s *objstore.Store, key string) error {
	var rnd [8]byte
	for {
		data, info, err := s.GetBytes(ctx, key)
		cond, err := objstore.Replacing(info, err)
		if err != nil {
			return err
		}
		n, nonces := 0, []string(nil)
		if !cond.Absent {
			if n, nonces, err = parseCounter(data); err != nil {
				return err
			}
		}
		_, _ = rand.Read(rnd[:])
		nonce := hex.EncodeToString(rnd[:])
		body := strings.Join(append([]string{strconv.Itoa(n + 1), nonce}, nonces[:min(len(nonces), 63)]...), " ")
		_, err = s.PutBytes(ctx, key, []byte(body), &objstore.PutOptions{If: cond})
		if errors.Is(err, objstore.ErrAmbiguous) {
			data, _, rerr := s.GetBytes(ctx, key)
			if rerr != nil {
				return fmt.Errorf("%w; reading back: %v", err, rerr)
			}
			if _, nonces, perr := parseCounter(data); perr == nil && slices.Contains(nonces, nonce) {
				return nil
			}
			continue
		}
		if errors.Is(err, objstore.ErrPreconditionFailed) || errors.Is(err, objstore.ErrConflict) {
			continue
		}
		return err
	}
}

// parseCounter reads an increment counter: its value and nonces.
func parseCounter(data []byte) (int, []string, error) {
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, nil, fmt.Errorf("counter holds %q", data)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, nil, fmt.Errorf("counter holds %q", data)
	}
	return n, f[1:], nil
}

// counterValue is the value of the counter at key.
func counterValue(t *testing.T, ctx context.Context, s *objstore.Store, key string) int {
	t.Helper()
	data, _ := mustGet(t, ctx, s, key)
	n, _, err := parseCounter(data)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testCASIncrements(t *testing.T, in Instance) {
	ctx, s := ctxT(t), in.Store
	needPut(t, ctx, s, true)
	needPut(t, ctx, s, false)
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range each {
				if err := increment(ctx, s, "counter"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := counterValue(t, ctx, s, "counter"); n != writers*each {
		t.Fatalf("counter = %d after %d increments: lost updates", n, writers*each)
	}
}

// Child-process protocol: the parent starts the test binary with these variables;
// the child prints "ready", waits for a line on stdin, runs, prints results.
const (
	envChild = "CAIRN_OBJSTORETEST_CHILD"
	envURL   = "CAIRN_OBJSTORETEST_URL"
	envKey   = "CAIRN_OBJSTORETEST_KEY"
	envN     = "CAIRN_OBJSTORETEST_N"
)

// MaybeChild runs the child side of a process test and exits, if this process
// was started as one. Call it first in TestMain.
func MaybeChild() {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	os.Exit(child(mode))
}

func child(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := objstore.Open(ctx, os.Getenv(envURL), nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer s.Close()
	key := os.Getenv(envKey)
	n, _ := strconv.Atoi(os.Getenv(envN))
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	switch mode {
	case "race":
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range n {
			wg.Go(func() {
				body := fmt.Sprintf("%d/%d", os.Getpid(), i)
				_, err := s.PutBytes(ctx, key, []byte(body), &objstore.PutOptions{If: objstore.IfAbsent()})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					fmt.Println("win", body)
				case errors.Is(err, objstore.ErrPreconditionFailed), errors.Is(err, objstore.ErrConflict):
					fmt.Println("lose")
				default:
					fmt.Println("error", err)
				}
			})
		}
		wg.Wait()
	case "cas":
		for range n {
			if err := increment(ctx, s, key); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("done")
	default:
		fmt.Println("error unknown mode", mode)
		return 1
	}
	return 0
}

// runChildren starts procs children in mode, releases them together, and
// returns their output lines.
func runChildren(t *testing.T, in Instance, procs int, mode, key string, n int) []string {
	t.Helper()
	type proc struct {
		cmd *exec.Cmd
		out *bufio.Scanner
		in  io.WriteCloser
	}
	var ps []proc
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+mode, envURL+"="+in.URL, envKey+"="+key, envN+"="+strconv.Itoa(n))
		cmd.Env = append(cmd.Env, in.Env...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("child did not get ready: %q", sc.Text())
		}
		ps = append(ps, proc{cmd, sc, stdin})
	}
	for _, p := range ps {
		fmt.Fprintln(p.in, "go")
	}
	var lines []string
	for _, p := range ps {
		for p.out.Scan() {
			lines = append(lines, p.out.Text())
		}
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("child: %v (output so far %q)", err, lines)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "error") {
			t.Errorf("child reported: %s", l)
		}
	}
	return lines
}

func testProcessRace(t *testing.T, in Instance, procs int) {
	const perProc = 8
	for round := range 3 {
		key := fmt.Sprintf("proc-race/%d", round)
		lines := runChildren(t, in, procs, "race", key, perProc)
		var wins []string
		loses := 0
		for _, l := range lines {
			if w, ok := strings.CutPrefix(l, "win "); ok {
				wins = append(wins, w)
			} else if l == "lose" {
				loses++
			}
		}
		if len(wins) != 1 || loses != procs*perProc-1 {
			t.Fatalf("round %d: %d winners (%q) and %d losers among %d racers in %d processes; want exactly one winner",
				round, len(wins), wins, loses, procs*perProc, procs)
		}
		data, _, err := in.Store.GetBytes(context.Background(), key)
		if err != nil || string(data) != wins[0] {
			t.Fatalf("round %d: stored %q (%v), winner wrote %q", round, data, err, wins[0])
		}
	}
}

func testProcessCAS(t *testing.T, in Instance, procs int) {
	const each = 15
	runChildren(t, in, procs, "cas", "proc-counter", each)
	if n := counterValue(t, context.Background(), in.Store, "proc-counter"); n != procs*each {
		t.Fatalf("counter = %d after %d processes × %d increments: lost updates", n, procs, each)
	}
}
