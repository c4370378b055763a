package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// TestIgnoringServerRefusesConditionalWork: on a server that accepts
// conditional headers and ignores them all (gofakes3 behind a proxy that
// strips them), every command that needs a condition refuses, naming what the
// probe found, and writes nothing; plain reads and writes still work.
func TestIgnoringServerRefusesConditionalWork(t *testing.T) {
	t.Parallel()
	ep := testenv.S3Server(t, "gofakes3")
	_, direct := testenv.NewBucket(t, ep)
	u, err := objstore.ParseURL(direct)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(ep.URL, faultproxy.Options{StripConditions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	store := fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1&path_style=true", u.Host, p.URL)
	obj := func(key string) string { return strings.Replace(store, "?", "/"+key+"?", 1) }
	dir := t.TempDir()
	env := append(ep.Env(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	file := filepath.Join(dir, "f.json")
	if err := os.WriteFile(file, []byte(`{"n":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBin(t, dir, env, "put", file, obj("plain.json")); code != 0 {
		t.Fatalf("a plain put: exit %d %s", code, stderr)
	}
	for _, args := range [][]string{
		{"put", file, obj("once.json"), "--if-absent"},
		{"doc", "create", obj("doc.json"), "--file", file},
		{"lock", "run", obj("locks/deploy"), "--", "true"},
		{"serve", "--ledger", obj("ledger"), "--handler-exec", "true", "--listen", "127.0.0.1:0"},
	} {
		code, _, stderr := runBin(t, dir, env, args...)
		t.Logf("cairn %s: %s", args[:2], stderr)
		if code == 0 || !strings.Contains(stderr, "not enforce") {
			t.Errorf("cairn %s on a server that ignores conditions: exit %d, stderr %q; want a refusal naming what is not enforced", args[:2], code, stderr)
		}
		// The remedy named is one a user of the command has: not a Go
		// option (docstore.Options.LastWriterWins), which it used to name.
		if strings.Contains(stderr, "Options") || strings.Contains(stderr, "LastWriterWins") {
			t.Errorf("cairn %s names a library option the command line cannot set: %q", args[:2], stderr)
		}
	}
	code, out, _ := runBin(t, dir, env, "fs", "ls", "--store", store, "/", "--json")
	if code != 0 || strings.Contains(out, "once.json") || strings.Contains(out, "doc.json") {
		t.Errorf("refused commands wrote objects: exit %d, listing %s", code, out)
	}
	code, _, stderr := runBin(t, dir, env, "probe", store, "--require", "put-if-absent")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "put-if-absent") {
		t.Errorf("probe --require put-if-absent: exit %d %q, want 3 naming the check", code, stderr)
	}
}
