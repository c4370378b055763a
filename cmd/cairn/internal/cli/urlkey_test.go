package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// treeHash describes every entry under dir except those under skip: path,
// mode, link target and contents.
func treeHash(t *testing.T, dir, skip string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s", strings.TrimPrefix(p, dir), fi.Mode())
		if fi.Mode().IsRegular() {
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

// No command reaches outside a store's root through "..", in any form (it
// used to be cleaned away before the root was chosen: `cairn put F
// "file:///srv/mirror/../../x"` wrote two levels above the mirror, and `cairn
// fs rm "file:///srv/store/../victims/"` deleted files outside the store).
// Each is refused with exit 2 before anything is written, and the tree
// around the store is unchanged.
func TestDotDotNeverLeavesTheStore(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	srv := filepath.Join(base, "srv")
	mirror := filepath.Join(srv, "mirror")
	file := filepath.Join(base, "f.txt")
	if err := os.WriteFile(file, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(srv, "victims", "v.txt"), filepath.Join(srv, "victims", "d.json"), filepath.Join(base, "x")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{"v":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The mirror is a directory store (cairn put makes one).
	if code, _, stderr := runBin(t, base, nil, "put", file, "file://"+mirror+"/seed.txt"); code != 0 {
		t.Fatalf("seeding the mirror: exit %d: %s", code, stderr)
	}
	before := treeHash(t, base, mirror)
	m := "file://" + mirror
	for _, args := range [][]string{
		{"put", file, m + "/../../x"},
		{"put", file, m + "/..%2F..%2Fescaped.txt"},
		{"put", file, m + "/..%2f..%2fescaped.txt"},
		{"put", file, m + "/%2E%2E/%2e%2E/x"},
		{"put", file, m + "/.%2E/victims/v.txt"},
		{"put", file, m + `/..\..\x`},
		{"put", file, mirror + "/../victims/v.txt"},
		{"put", file, "srv/mirror/../../x"},
		{"put", file, "--store", m + "/..", "--key", "x"},
		{"put", file, "--store", m, "--key", "../victims/v.txt"},
		{"put", file, "--store", m, "--key", "a/../../x"},
		{"fs", "rm", m + "/../victims/"},
		{"fs", "rm", m + "/%2E%2E/victims/"},
		{"fs", "rm", "--store", m + "/..", "victims"},
		{"fs", "rm", "--store", m, "../victims"},
		{"fs", "mv", m + "/../victims/", m + "/stolen/"},
		{"doc", "update", m + "/../victims/d.json", "--set", "v=2"},
		{"doc", "update", "--store", m, "--key", "../victims/d.json", "--set", "v=2"},
		{"doc", "create", m + "/..%2Fvictims%2Fnew.json", "--file", filepath.Join(srv, "victims", "d.json")},
		{"lock", "run", m + "/../victims/lock", "--", "true"},
		{"lock", "run", "--store", m, "--key", "../victims/lock", "--", "true"},
		{"lock", "tree", "--store", m + "/../victims", "--write", "/a", "--", "true"},
		{"ledger", "ls", "--ledger", m + "/../victims"},
		{"ledger", "ls", "--ledger", m + "/%2E%2E/victims"},
		{"probe", m + "/../victims"},
	} {
		code, _, stderr := runBin(t, base, nil, args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, `".."`) {
			t.Errorf("cairn %q: exit %d, stderr %q; want exit 2 naming the \"..\" segment", args, code, stderr)
		}
	}
	if after := treeHash(t, base, mirror); after != before {
		t.Errorf("the tree around the store changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// --store URL --key KEY takes the key byte for byte: keys holding '#', '?',
// '%2F', spaces or an encoded ".." are written, read and locked as
// themselves (in a URL, "#frag" silently wrote key "h", and a '?' in an s3
// key swallowed ?endpoint=). In a URL the same characters are refused with
// exit 2, pointing to --key, never read as something else.
func TestKeyFlagIsByteExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "store")
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "doc.json")
	if err := os.WriteFile(doc, []byte(`{"n":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := []string{"h#frag", "a?b=c", "x%2Fy", "sp ace/ünï 日本.txt", "..%2F..%2Fescaped.txt", "%2E%2E", "k#?endpoint=x", "100%"}
	for _, k := range keys {
		if code, _, stderr := runBin(t, dir, nil, "put", file, "--store", store, "--key", k); code != 0 {
			t.Errorf("put --key %q: exit %d: %s", k, code, stderr)
		}
		d := "docs/" + k + ".json"
		if code, _, stderr := runBin(t, dir, nil, "doc", "create", "--store", store, "--key", d, "--file", doc); code != 0 {
			t.Errorf("doc create --key %q: exit %d: %s", d, code, stderr)
		}
		if code, _, stderr := runBin(t, dir, nil, "doc", "update", "--store", store, "--key", d, "--set", "n=2"); code != 0 {
			t.Errorf("doc update --key %q: exit %d: %s", d, code, stderr)
		}
		code, out, stderr := runBin(t, dir, nil, "doc", "get", "--store", store, "--key", d, "--json")
		var got struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Key != d || string(got.Value) != `{"n":2}` {
			t.Errorf("doc get --key %q: exit %d, %q, %s; want key %q and {\"n\":2}", d, code, out, stderr, d)
		}
		l := "locks/" + k
		if code, _, stderr := runBin(t, dir, nil, "lock", "run", "--store", store, "--key", l, "--", "true"); code != 0 {
			t.Errorf("lock run --key %q: exit %d: %s", l, code, stderr)
		}
		code, out, stderr = runBin(t, dir, nil, "lock", "status", "--store", store, "--key", l, "--json")
		if code != 0 || !strings.Contains(out, `"held":false`) {
			t.Errorf("lock status --key %q: exit %d, %q, %s", l, code, out, stderr)
		}
	}
	b, err := fsstore.OpenBackend(filepath.Join(dir, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := objstore.New(b, nil)
	var listed []string
	for info, err := range s.List(t.Context(), "", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info.Key, "/") || strings.HasPrefix(info.Key, "sp ace/") {
			listed = append(listed, info.Key)
		}
	}
	for _, k := range keys {
		data, _, err := s.GetBytes(t.Context(), k)
		if err != nil || string(data) != "payload" {
			t.Errorf("key %q: %q, %v; want the payload under exactly that key (store holds %q)", k, data, err, listed)
		}
	}
	// In a URL, the same keys are refused and point to --key.
	for _, url := range []string{
		store + "/h#frag",
		store + "/k#?endpoint=http://127.0.0.1:1",
		"s3://bucket/a?b?endpoint=http://127.0.0.1:1",
		"s3://bucket/k#?endpoint=http://127.0.0.1:1",
		store + "/dir//k",
		store + "/dir/./k",
	} {
		code, _, stderr := runBin(t, dir, nil, "put", file, url)
		if code != cli.ExitUsage || !strings.Contains(stderr, "--key") {
			t.Errorf("put %q: exit %d, stderr %q; want exit 2 pointing to --key", url, code, stderr)
		}
	}
	if _, err := s.Head(t.Context(), "h"); err == nil {
		t.Errorf("a '#' in a URL wrote key h")
	}
	// The two ways of naming the object exclude each other, and each half of
	// --store/--key needs the other.
	for _, args := range [][]string{
		{"put", file, store + "/k", "--store", store, "--key", "k"},
		{"put", file, "--store", store},
		{"put", file, "--key", "k"},
		{"put", file},
		{"doc", "get", "--key", "k"},
		{"lock", "status", "--store", store},
	} {
		if code, _, stderr := runBin(t, dir, nil, args...); code != cli.ExitUsage || !strings.Contains(stderr, "--") {
			t.Errorf("cairn %q: exit %d, stderr %q; want exit 2", args, code, stderr)
		}
	}
}

// A handler following the README's pattern, `cairn put - --store URL --key
// "$CAIRN_KEY"`, writes what the event names, inside the store, whatever the
// key holds.
func TestHandlerPatternWithHostileKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mirror := filepath.Join(dir, "srv", "mirror")
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		t.Fatal(err)
	}
	before := treeHash(t, dir, mirror)
	for _, k := range []string{"..%2F..%2Fescaped.txt", "a#b", "q?endpoint=x&region=y", "%2E%2E/x", ".. /x"} {
		sh := exec.Command("sh", "-c", `echo data | "$CAIRN" put - --store "file://$MIRROR" --key "$CAIRN_KEY"`)
		sh.Env = append(os.Environ(), "CAIRN="+buildCairn(t), "MIRROR="+mirror, "CAIRN_KEY="+k)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Errorf("handler for key %q: %v: %s", k, err, out)
		}
		if _, err := os.Stat(filepath.Join(mirror, k)); err != nil {
			t.Errorf("key %q is not at %s: %v", k, filepath.Join(mirror, k), err)
		}
	}
	if after := treeHash(t, dir, mirror); after != before {
		t.Errorf("the tree around the mirror changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// `demo --dir` with a relative directory builds its store's file:// URL from
// the absolute path (it was "file://rel/bucket", a URL whose host is "rel",
// refused).
func TestDemoRelativeDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runBin(t, dir, nil, "demo", "--dir", "rel", "--writes", "20", "--keys", "5"); code != 0 {
		t.Fatalf("demo --dir rel: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "rel", "bucket")); err != nil {
		t.Errorf("the demo's bucket is not under rel/: %v", err)
	}
}
