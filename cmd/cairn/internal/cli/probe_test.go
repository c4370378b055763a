package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// readOnlyEnv returns the environment of temporary MinIO credentials (STS
// AssumeRole with a session policy) that may only read bucket: what `aws s3
// cp` from the bucket needs, no more.
func readOnlyEnv(t *testing.T, ep testenv.S3Endpoint, bucket string) []string {
	t.Helper()
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow",` +
		`"Action":["s3:GetObject","s3:ListBucket","s3:GetBucketLocation"],` +
		`"Resource":["arn:aws:s3:::` + bucket + `","arn:aws:s3:::` + bucket + `/*"]}]}`
	ak, sk, st := testenv.AssumeRole(t, ep, policy)
	return []string{"AWS_ACCESS_KEY_ID=" + ak, "AWS_SECRET_ACCESS_KEY=" + sk,
		"AWS_SESSION_TOKEN=" + st, "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}
}

// objectURL turns a store URL and a key into the object's URL.
func objectURL(storeURL, key string) string { return strings.Replace(storeURL, "?", "/"+key+"?", 1) }

func bucketKeys(t *testing.T, s *objstore.Store) []string {
	t.Helper()
	all, err := s.ListAll(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range all {
		keys = append(keys, i.Key)
	}
	return keys
}

// Reads need no write permission (issue #17): with credentials that may only
// read the bucket, doc get and fs ls succeed and write nothing (no probe, no
// shared verdict, no scratch keys). They used to run the capability probe,
// whose scratch writes were denied.
func TestReadOnlyCredentialsRead(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	b, storeURL := testenv.NewBucket(t, ep)
	admin := objstore.New(b, nil)
	ctx := context.Background()
	for key, body := range map[string]string{"docs/registry.json": `{"owner":"data-eng"}`, "data/part-1.txt": "rows"} {
		if _, err := admin.PutBytes(ctx, key, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := bucketKeys(t, admin)
	dir := t.TempDir()
	cache := t.TempDir()
	env := append(readOnlyEnv(t, ep, strings.TrimPrefix(strings.SplitN(storeURL, "?", 2)[0], "s3://")), "XDG_CACHE_HOME="+cache)

	if code, _, stderr := runBin(t, dir, env, "put", "-", objectURL(storeURL, "data/denied.txt")); code == 0 {
		t.Fatalf("the read-only credentials could write (stderr %q): the test proves nothing", stderr)
	}
	code, out, stderr := runBin(t, dir, env, "doc", "get", objectURL(storeURL, "docs/registry.json"))
	if code != 0 || !strings.Contains(out, "data-eng") {
		t.Errorf("doc get with read-only credentials: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runBin(t, dir, env, "doc", "get", objectURL(storeURL, "docs/registry.json"), "--json")
	if code != 0 || !strings.Contains(out, `"rev"`) {
		t.Errorf("doc get --json with read-only credentials: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runBin(t, dir, env, "fs", "ls", "--store", storeURL, "data/")
	if code != 0 || !strings.Contains(out, "part-1.txt") {
		t.Errorf("fs ls with read-only credentials: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, stderr = runBin(t, dir, env, "doc", "get", objectURL(storeURL, "docs/missing.json"))
	if code != cli.ExitRuntime || !strings.Contains(stderr, "not found") || strings.Contains(stderr, "probe") {
		t.Errorf("doc get of a missing document, read-only: exit %d, stderr %q; want exit 1 saying not found", code, stderr)
	}
	if after := bucketKeys(t, admin); !slices.Equal(after, before) {
		t.Errorf("read-only reads changed the bucket: %v, was %v", after, before)
	}
	if files, _ := filepath.Glob(filepath.Join(cache, "cairn", "probe", "*")); len(files) != 0 {
		t.Errorf("read-only reads saved a probe verdict: %v", files)
	}
}

// savedVerdict is the JSON of a saved probe verdict (objstore.ProbeVerdict,
// declared here so that this test also builds against code without it).
type savedVerdict struct {
	Format   int                  `json:"format"`
	Endpoint string               `json:"endpoint"`
	Bucket   string               `json:"bucket"`
	Server   string               `json:"server"`
	ProbedAt time.Time            `json:"probed_at"`
	Report   objstore.ProbeReport `json:"report"`
}

// verdictOf reads the one saved verdict under the cache directory.
func verdictOf(t *testing.T, cache string) (string, savedVerdict) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(cache, "cairn", "probe", "*.json"))
	if len(files) != 1 {
		t.Fatalf("saved verdicts %v, want one", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var v savedVerdict
	if err := json.Unmarshal(data, &v); err != nil || v.Format != 1 {
		t.Fatalf("saved verdict %s: %v\n%s", files[0], err, data)
	}
	return files[0], v
}

// A write that needs conditions probes once; the next write command reuses
// the saved verdict (nothing probes: the local file and the bucket's shared
// verdict are left as they were), until the verdict is older than a day or
// the server gives another Server header; `cairn probe` always probes and
// refreshes both, and --no-cache saves nothing.
func TestWriteCommandsReuseProbeVerdict(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	b, storeURL := testenv.NewBucket(t, ep)
	admin := objstore.New(b, nil)
	dir := t.TempDir()
	cache := t.TempDir()
	env := append(ep.Env(), "XDG_CACHE_HOME="+cache)
	if err := os.WriteFile(filepath.Join(dir, "doc.json"), []byte(`{"n":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := objectURL(storeURL, "state/job.json")
	probeKeys := func() []string {
		t.Helper()
		var keys []string
		for _, k := range bucketKeys(t, admin) {
			if strings.HasPrefix(k, "cairn-probe/") {
				keys = append(keys, k)
			}
		}
		return keys
	}
	must := func(args ...string) string {
		t.Helper()
		code, out, stderr := runBin(t, dir, env, args...)
		if code != 0 {
			t.Fatalf("cairn %q: exit %d: %s", args, code, stderr)
		}
		return out
	}

	must("doc", "create", doc, "--file", "doc.json")
	path, v1 := verdictOf(t, cache)
	if !v1.Report.Capabilities.ConditionalWrites() || v1.Bucket == "" || v1.Endpoint != ep.URL || v1.Server == "" {
		t.Errorf("saved verdict %+v", v1)
	}
	for _, args := range [][]string{
		{"doc", "update", doc, "--set", "n=1"},
		{"put", "doc.json", objectURL(storeURL, "state/once.json"), "--if-absent"},
	} {
		must(args...)
		if _, v := verdictOf(t, cache); !v.ProbedAt.Equal(v1.ProbedAt) {
			t.Errorf("cairn %s probed again (verdict of %s replaced by one of %s)", args[:2], v1.ProbedAt, v.ProbedAt)
		}
	}
	if keys := probeKeys(); len(keys) != 0 {
		t.Errorf("write commands left %v in the bucket", keys)
	}

	// The same verdict, but the server now calls itself something else.
	rewrite := func(f func(*savedVerdict)) {
		t.Helper()
		_, v := verdictOf(t, cache)
		f(&v)
		data, _ := json.Marshal(v)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, change := range map[string]func(*savedVerdict){
		"another server":  func(v *savedVerdict) { v.Server = "NotTheSameServer" },
		"a stale verdict": func(v *savedVerdict) { v.ProbedAt = time.Now().Add(-25 * time.Hour) },
	} {
		rewrite(change)
		_, old := verdictOf(t, cache)
		must("doc", "update", doc, "--set", "n=2")
		if _, v := verdictOf(t, cache); v.ProbedAt.Equal(old.ProbedAt) || v.Server != v1.Server {
			t.Errorf("with %s the write command did not probe again: %+v", name, v)
		}
	}

	_, v2 := verdictOf(t, cache)
	must("probe", storeURL, "--no-cache")
	if _, v := verdictOf(t, cache); !v.ProbedAt.Equal(v2.ProbedAt) {
		t.Error("probe --no-cache saved its verdict")
	}
	if keys := probeKeys(); len(keys) != 0 {
		t.Errorf("probe --no-cache left %v in the bucket", keys)
	}
	out := must("probe", storeURL, "--json")
	var rep struct {
		PreviousShared *struct {
			Disagree []string `json:"disagree"`
		} `json:"previous_shared"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("probe --json: %v\n%s", err, out)
	}
	if _, v := verdictOf(t, cache); !v.ProbedAt.After(v2.ProbedAt) {
		t.Error("probe did not refresh the local verdict")
	}
	if keys := probeKeys(); !slices.Equal(keys, []string{"cairn-probe/verdict.json"}) {
		t.Errorf("after probe the bucket's cairn-probe/ holds %v, want the shared verdict alone", keys)
	}
	if rep.PreviousShared != nil {
		t.Errorf("probe's previous_shared = %+v with nothing shared before", rep.PreviousShared)
	}
	out = must("probe", storeURL)
	if !strings.Contains(out, "the verdict shared in the bucket") || !strings.Contains(out, "agrees") {
		t.Errorf("probe's text output does not mention the shared verdict:\n%s", out)
	}
}

// --require names are checked before anything is sent, and the error and
// --help list the valid names (an unknown name used to run the whole probe
// first, then exit 2).
func TestProbeRequireValidatedFirst(t *testing.T) {
	t.Parallel()
	// Nothing listens at port 1: a probe would fail to connect, exit 1.
	unreachable := "s3://bucket?endpoint=http://127.0.0.1:1&path_style=true&region=us-east-1"
	names := []string{"put-if-absent", "put-if-match", "delete-if-match", "copy-if-absent", "copy-if-match", "multipart-if-absent", "multipart-if-match", "racing-creates", "racing-updates"}
	code, _, stderr := run(t, "probe", unreachable, "--require", "put-if-absent,bogus")
	if code != cli.ExitUsage || !strings.Contains(stderr, `"bogus"`) {
		t.Errorf("--require bogus: exit %d, stderr %q; want exit 2 naming it, before any request", code, stderr)
	}
	for _, n := range names {
		if !strings.Contains(stderr, n) {
			t.Errorf("the --require error does not list %s: %q", n, stderr)
		}
	}
	code, out, _ := run(t, "probe", "--help")
	if code != 0 {
		t.Fatalf("probe --help: exit %d", code)
	}
	for _, n := range names {
		if !strings.Contains(out, n) {
			t.Errorf("probe --help does not list the check %s", n)
		}
	}
	if !strings.Contains(out, "--no-cache") {
		t.Error("probe --help does not show --no-cache")
	}
}

// A network fault during the probe a write needs is a probe failure that
// says so; it is not reported as a write of unknown outcome (the write was
// never sent).
func TestProbeNetworkFaultSaysSo(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	b, _ := testenv.NewBucket(t, ep)
	bucket := strings.TrimPrefix(b.String(), "s3://")
	bucket, _, _ = strings.Cut(bucket, " ")
	p, err := faultproxy.New(ep.URL, faultproxy.Options{LostRequestRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	storeURL := "s3://" + bucket + "?endpoint=" + p.URL + "&region=us-east-1&path_style=true"
	env := append(ep.Env(), "XDG_CACHE_HOME="+t.TempDir())
	code, _, stderr := runBin(t, t.TempDir(), env, "doc", "update", objectURL(storeURL, "state/job.json"), "--set", "n=1", "--create")
	t.Logf("stderr: %s", stderr)
	if code != cli.ExitRuntime {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"probe of", "failed", "nothing is known about its conditions"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not say %q", stderr, want)
		}
	}
	if strings.Contains(stderr, "outcome unknown") || strings.Contains(stderr, "may have been applied") {
		t.Errorf("a write that was never sent is reported as of unknown outcome: %q", stderr)
	}
	if strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("error is more than one line: %q", stderr)
	}
}
