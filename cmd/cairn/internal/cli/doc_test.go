package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
)

func TestDocCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := run(t, "probe", dir); code != 0 { // makes dir a store (.cairn/)
		t.Fatal(stderr)
	}
	url := "file://" + dir + "/meta/registry.json"
	init := filepath.Join(t.TempDir(), "init.json")
	os.WriteFile(init, []byte(`{"datasets": {}, "n": 0}`), 0o644)
	if code, out, stderr := run(t, "doc", "create", url, "--file", init); code != 0 || len(strings.TrimSpace(out)) != 32 {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	if code, _, _ := run(t, "doc", "create", url, "--file", init); code != cli.ExitPrecondition {
		t.Fatalf("second create: exit %d, want 3", code)
	}
	// Concurrent CLI updates lose nothing.
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			if code, _, stderr := run(t, "doc", "update", url, "--set", "datasets.d"+string(rune('a'+i))+"=true"); code != 0 {
				t.Errorf("update %d: %s", i, stderr)
			}
		})
	}
	wg.Wait()
	code, out, _ := run(t, "doc", "get", url, "--json")
	if code != 0 {
		t.Fatal(out)
	}
	var got struct {
		Rev   int64 `json:"rev"`
		Value struct {
			Datasets map[string]bool `json:"datasets"`
		} `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Value.Datasets) != 12 || got.Rev < 2 {
		t.Fatalf("after 12 concurrent updates: %d datasets, rev %d", len(got.Value.Datasets), got.Rev)
	}
	patch := filepath.Join(t.TempDir(), "patch.json")
	os.WriteFile(patch, []byte(`{"datasets": {"da": null}, "owner": "eng"}`), 0o644)
	if code, _, stderr := run(t, "doc", "update", url, "--merge", patch); code != 0 {
		t.Fatal(stderr)
	}
	_, out, _ = run(t, "doc", "get", url)
	if strings.Contains(out, `"da"`) || !strings.Contains(out, `"owner": "eng"`) {
		t.Fatalf("merge patch not applied: %s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"doc", "update", url}, cli.ExitUsage},
		{[]string{"doc", "update", url, "--set", "noequals"}, cli.ExitUsage},
		{[]string{"doc", "update", url, "--set", "owner.x=1"}, cli.ExitUsage}, // owner is a string
		{[]string{"doc", "update", "file://" + dir + "/missing.json", "--set", "a=1"}, cli.ExitRuntime},
		{[]string{"doc", "get", "s3://bucket-only"}, cli.ExitUsage},
		{[]string{"doc", "create", url}, cli.ExitUsage},
	} {
		if code, _, stderr := run(t, tc.args...); code != tc.code {
			t.Errorf("cairn %q: exit %d, want %d (%s)", tc.args, code, tc.code, stderr)
		}
	}
	if code, _, stderr := run(t, "doc", "update", "file://"+dir+"/new.json", "--set", "a=1", "--create"); code != 0 {
		t.Errorf("update --create: %s", stderr)
	}
}

func TestPutCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "data.bin")
	os.WriteFile(src, []byte(strings.Repeat("x", 5000)), 0o644)
	url := dir + "/up/data.bin"
	code, out, stderr := run(t, "put", src, url, "--if-absent", "--part-size", "1024")
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "-5") {
		t.Fatalf("multipart put: %d %q %q", code, out, stderr)
	}
	etag := strings.TrimSpace(out)
	if code, _, _ := run(t, "put", src, url, "--if-absent"); code != cli.ExitPrecondition {
		t.Fatalf("second --if-absent: exit %d, want 3", code)
	}
	if code, _, _ := run(t, "put", src, url, "--if-match", "0123456789abcdef0123456789abcdef"); code != cli.ExitPrecondition {
		t.Fatalf("--if-match stale: exit %d, want 3", code)
	}
	if code, _, stderr := run(t, "put", src, url, "--if-match", etag); code != 0 {
		t.Fatalf("--if-match current: %s", stderr)
	}
	if code, _, stderr := run(t, "put", src, url, "--retry-on-change"); code != 0 {
		t.Fatalf("--retry-on-change: %s", stderr)
	}
	if code, _, _ := run(t, "put", src, url, "--if-absent", "--retry-on-change"); code != cli.ExitUsage {
		t.Fatalf("conflicting flags: exit %d", code)
	}
	if code, _, _ := run(t, "put", filepath.Join(dir, "nope"), url); code != cli.ExitUsage {
		t.Fatalf("missing file: exit %d", code)
	}
}

func TestPolicyGenerate(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "policy", "generate", "--bucket", "lake", "--create-only", "datasets/", "--cas", "metastore/", "--principal", "arn:aws:iam::1:role/r")
	if code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, "s3:if-none-match") {
		t.Fatalf("policy: %d %s", code, out)
	}
	if code, _, _ := run(t, "policy", "generate", "--bucket", "lake"); code != cli.ExitUsage {
		t.Fatalf("no prefixes: exit %d", code)
	}
}
