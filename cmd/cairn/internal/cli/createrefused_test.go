package cli_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// A store that refuses a write-once create of a key that reads as absent
// (SeaweedFS does, for a key whose name is, or was, also a folder) is
// reported as such by every command that creates: not as contention ("gave
// up after repeated conflicting writes … raise Options.MaxAttempts"), not as
// a lock "held by another holder", not as an existing object (exit 3), as it
// used to be. No server the suite runs answers so: an HTTP proxy in front of
// MinIO plays SeaweedFS's answer for the keys named here.
func TestCreateRefusedOnAbsentKeySaysSo(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	b, _ := testenv.NewBucket(t, ep)
	bucket := strings.TrimPrefix(strings.Fields(b.String())[0], "s3://")
	folders := []string{"/reg.json", "/locks/deploy", "/once.txt"}
	u, err := url.Parse(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host // keep the signed Host header
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, f := range folders {
			if r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" && r.URL.Path == "/"+bucket+f {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusPreconditionFailed)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>`))
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	store := "s3://" + bucket + "?endpoint=" + srv.URL + "&region=us-east-1&path_style=true"
	dir := t.TempDir()
	env := append(ep.Env(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	file := filepath.Join(dir, "f.json")
	if err := os.WriteFile(file, []byte(`{"n":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"doc", "create", objectURL(store, "reg.json"), "--file", file},
		{"lock", "run", objectURL(store, "locks/deploy"), "--", "true"},
		{"put", file, objectURL(store, "once.txt"), "--if-absent"},
	} {
		code, _, stderr := runBin(t, dir, env, args...)
		t.Logf("cairn %s: exit %d: %s", args[:2], code, stderr)
		if code != cli.ExitRuntime || !strings.Contains(stderr, "although it reads as absent") {
			t.Errorf("cairn %s on a key the store refuses to create: exit %d %q; want exit 1 saying it reads as absent", args[:2], code, stderr)
		}
		for _, wrong := range []string{"MaxAttempts", "conflicting writes", "held by another"} {
			if strings.Contains(stderr, wrong) {
				t.Errorf("cairn %s blames %q: %s", args[:2], wrong, stderr)
			}
		}
	}
}
