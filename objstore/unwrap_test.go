package objstore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
	"github.com/cairn-s3/cairn/objstore/metrics"
	"github.com/cairn-s3/cairn/objstore/policy"
)

// A probe verdict is saved and reused through the wrappers that leave what
// the server enforces unchanged (a key prefix, metrics, a write policy, and
// any stack of them): each has an Unwrap, and the Store finds the server's
// identity beneath. A Probe with Share publishes the verdict at the bucket's
// root, under every prefix. Through fault injection, which can make a server
// seem to enforce what it does not, nothing is saved. Before, only a key
// prefix was looked through: a metrics- or policy-wrapped S3 store probed
// in every process.
func TestProbeVerdictThroughWrappers(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	prefixed := func(t *testing.T, b objstore.Backend, p string) objstore.Backend {
		t.Helper()
		x, err := objstore.Prefixed(b, p)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	rules := policy.Rules{CreateOnly: []string{"archive/"}, CAS: []string{"registry/"}}
	for _, tc := range []struct {
		name  string
		wrap  func(t *testing.T, b objstore.Backend) objstore.Backend
		saved bool
	}{
		{"prefix", func(t *testing.T, b objstore.Backend) objstore.Backend { return prefixed(t, b, "tenant/") }, true},
		{"metrics", func(t *testing.T, b objstore.Backend) objstore.Backend { return m.Wrap(b, "metrics") }, true},
		{"policy", func(t *testing.T, b objstore.Backend) objstore.Backend { return policy.Wrap(b, rules) }, true},
		{"metrics-policy-prefix", func(t *testing.T, b objstore.Backend) objstore.Backend {
			return m.Wrap(policy.Wrap(prefixed(t, b, "a/b/"), rules), "stack")
		}, true},
		{"faulty", func(t *testing.T, b objstore.Backend) objstore.Backend { return faulty.New(b, nil) }, false},
		{"metrics-faulty", func(t *testing.T, b objstore.Backend) objstore.Backend { return m.Wrap(faulty.New(b, nil), "faulty") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			inner := mem.OpenBackend("unwrap-" + tc.name)
			b := &identified{Backend: inner, endpoint: "http://" + tc.name + ":9000", server: "MinIO"}
			dir := t.TempDir()
			for i, want := range []bool{true, !tc.saved} {
				s := objstore.New(tc.wrap(t, b), &objstore.Options{ProbeCacheDir: dir})
				if _, err := s.PutBytes(ctx, "k", []byte("x"), &objstore.PutOptions{If: objstore.IfMatch("0123")}); err == nil {
					t.Fatal("if-match with a wrong etag succeeded")
				}
				if probed := b.scratchWrites() > 0; probed != want {
					t.Errorf("store %d: probed %v, want %v (verdict saved through the wrapper: %v)", i+1, probed, want, tc.saved)
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
			if saved := len(files) > 0; saved != tc.saved {
				t.Errorf("verdict files %v; want saved = %v", files, tc.saved)
			}
			if !tc.saved {
				return
			}
			if _, err := objstore.New(tc.wrap(t, b), &objstore.Options{ProbeCacheDir: dir}).Probe(ctx, &objstore.ProbeOptions{Share: true}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := objstore.New(inner, nil).GetBytes(ctx, "cairn-probe/verdict.json"); err != nil {
				t.Errorf("the shared verdict is not at the bucket's root: %v", err)
			}
		})
	}
}
