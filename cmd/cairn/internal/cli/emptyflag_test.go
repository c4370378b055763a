package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
)

// A flag carrying a condition, token, key, name or filter refuses an empty
// value — what "--if-match $ETAG" becomes after a lookup that failed — with
// exit 2 and a message naming the flag, before anything is written. `put
// --if-match ""` used to write unconditionally and exit 0, and `fs rm --store
// "" victims` took victims for a local path and deleted it.
func TestEmptyFlagValuesRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "d.json")
	if err := os.WriteFile(doc, []byte(`{"n":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file://" + filepath.Join(dir, "store")
	obj := store + "/obj.txt"
	if code, _, stderr := runBin(t, dir, nil, "put", doc, obj); code != 0 {
		t.Fatalf("seeding: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runBin(t, dir, nil, "doc", "create", store+"/doc.json", "--file", doc); code != 0 {
		t.Fatalf("seeding: exit %d: %s", code, stderr)
	}
	victim := filepath.Join(dir, "victims", "v.txt")
	if err := os.MkdirAll(filepath.Dir(victim), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeHash(t, dir, "")
	for _, tc := range []struct {
		flag string
		args []string
		env  []string
	}{
		{"--if-match", []string{"put", file, obj, "--if-match", ""}, nil},
		{"--if-match", []string{"put", file, obj, "--if-match="}, nil},
		{"--if-match", []string{"put", file, obj, "--if-match", `""`}, nil},
		{"--if-match", []string{"put", file, obj, "--if-match", `W/""`}, nil},
		{"--fence-token", []string{"put", file, obj, "--fence-token", ""}, nil},
		{"--store", []string{"put", file, "--store", "", "--key", "obj.txt"}, nil},
		{"--key", []string{"put", file, "--store", store, "--key", ""}, nil},
		{"--fence-token", []string{"doc", "update", store + "/doc.json", "--set", "n=2", "--fence-token", ""}, nil},
		{"--merge", []string{"doc", "update", store + "/doc.json", "--set", "n=2", "--merge", ""}, nil},
		{"--key", []string{"doc", "get", "--store", store, "--key", ""}, nil},
		{"--file", []string{"doc", "create", store + "/new.json", "--file", ""}, nil},
		{"--store", []string{"fs", "rm", "--store", "", "victims"}, nil},
		{"--store", []string{"fs", "ls", "--store", "", "victims"}, nil},
		{"--output", []string{"fs", "snapshot", obj, "-o", ""}, nil},
		{"--key", []string{"lock", "run", "--store", store, "--key", "", "--", "true"}, nil},
		{"--store", []string{"lock", "tree", "--store", "", "--write", "/a", "--", "true"}, nil},
		{"--write", []string{"lock", "tree", "--store", store, "--write", "", "--", "true"}, nil},
		{"--read", []string{"lock", "tree", "--store", store, "--read", "", "--", "true"}, nil},
		{"--prefix", []string{"audit", "--store", store, "--prefix", "", "--dry-run"}, nil},
		{"--store", []string{"audit", "--store", "", "--dry-run"}, nil},
		{"--key", []string{"replay", "--bucket", "b", "--key", "", "--dry-run"}, nil},
		{"--bucket", []string{"replay", "--bucket", "", "--dry-run"}, nil},
		{"--prefix", []string{"ledger", "ls", "--prefix", ""}, nil},
		{"--ledger", []string{"ledger", "ls", "--ledger", ""}, nil},
		{"--create-only", []string{"policy", "generate", "--bucket", "b", "--create-only", ""}, nil},
		{"--principal", []string{"policy", "generate", "--bucket", "b", "--cas", "p/", "--principal", ""}, nil},
		{"--require", []string{"probe", store, "--require", ""}, nil},
		{"--webhook-token", []string{"serve", "--handler-exec", "true", "--webhook-token", "", "--concurrency", "0"}, nil},
		{"--read-token", []string{"serve", "--handler-exec", "true", "--read-token", "", "--concurrency", "0"}, nil},
		{"CAIRN_WEBHOOK_TOKEN", []string{"serve", "--handler-exec", "true", "--concurrency", "0"}, []string{"CAIRN_WEBHOOK_TOKEN="}},
		{"--handler-exec", []string{"serve", "--handler-exec", "", "--concurrency", "0"}, nil},
	} {
		code, _, stderr := runBin(t, dir, tc.env, tc.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tc.flag) || !strings.Contains(stderr, "empty") {
			t.Errorf("cairn %q (env %q): exit %d, stderr %q; want exit 2 naming %s as empty", tc.args, tc.env, code, stderr, tc.flag)
		}
	}
	if after := treeHash(t, dir, ""); after != before {
		t.Errorf("a refused command changed files:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
