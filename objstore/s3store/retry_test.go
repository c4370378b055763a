package s3store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// lossyProxy forwards to MinIO; for the first PUT it forwards the request (so
// the server applies it) and then drops the connection instead of answering.
type lossyProxy struct {
	target *url.URL
	rp     *httputil.ReverseProxy
	drop   atomic.Bool
	puts   atomic.Int32
}

func newLossyProxy(t *testing.T, endpoint string) (*lossyProxy, *httptest.Server) {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{target: u}
	p.rp = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host // keep the signed Host header
	}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut {
		p.puts.Add(1)
		if p.drop.CompareAndSwap(true, false) {
			rec := httptest.NewRecorder()
			p.rp.ServeHTTP(rec, r) // applied by the server…
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // …and the response is lost
			}
			return
		}
	}
	p.rp.ServeHTTP(w, r)
}

func TestConditionalWriteIsNotRetriedAfterLostResponse(t *testing.T) {
	ep := testenv.S3(t)
	_, url := testenv.NewBucket(t, ep)
	u, _ := objstore.ParseURL(url)
	bucket := u.Host
	proxy, srv := newLossyProxy(t, ep.URL)
	ctx := context.Background()
	b, err := s3store.OpenBackend(ctx, bucket, &s3store.Options{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(b, &objstore.Options{Capabilities: &objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true}})

	// Conditional: sent once, reported ambiguous (a retry would have seen a false 412).
	proxy.drop.Store(true)
	before := proxy.puts.Load()
	_, err = s.PutBytes(ctx, "cond", []byte("mine"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("conditional put with lost response: %v, want ErrAmbiguous", err)
	}
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatal("a lost response was reported as a failed precondition")
	}
	if n := proxy.puts.Load() - before; n != 1 {
		t.Fatalf("conditional put was sent %d times, want exactly once", n)
	}
	if data, _, err := s.GetBytes(ctx, "cond"); err != nil || string(data) != "mine" {
		t.Fatalf("the write was applied by the server: got %q, %v", data, err)
	}

	// Unconditional: idempotent, so the SDK's retry is allowed and succeeds.
	proxy.drop.Store(true)
	before = proxy.puts.Load()
	if _, err := s.PutBytes(ctx, "plain", []byte("x"), nil); err != nil {
		t.Fatalf("unconditional put with one lost response: %v (want the SDK to retry)", err)
	}
	if n := proxy.puts.Load() - before; n < 2 {
		t.Fatalf("unconditional put sent %d times, want a retry", n)
	}
}

func TestBadInput(t *testing.T) { // not parallel: it sets the environment
	ctx := context.Background()
	for _, raw := range []string{"s3://", "s3:///prefix", "s3://b?endpoint=ftp://x", "s3://b?path_style=maybe", "s3://b?colour=blue"} {
		if _, err := objstore.Open(ctx, raw, nil); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("Open(%q): %v, want ErrInvalidURL", raw, err)
		}
	}
	ep := testenv.S3(t)
	// Missing bucket: a clear error, not a panic.
	t.Setenv("AWS_ACCESS_KEY_ID", ep.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", ep.SecretKey)
	s, err := objstore.Open(ctx, "s3://no-such-bucket-cairn?endpoint="+ep.URL+"&path_style=true&region=us-east-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(ctx, "k", nil, nil); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("put to a missing bucket: %v, want ErrBucketNotFound", err)
	}
	// Wrong credentials.
	_, url := testenv.NewBucket(t, ep)
	b, _ := objstore.ParseURL(url)
	bad, _ := s3store.OpenBackend(ctx, b.Host, &s3store.Options{Endpoint: ep.URL, PathStyle: true, AccessKeyID: "nobody", SecretAccessKey: "wrong"})
	if _, err := objstore.New(bad, nil).PutBytes(ctx, "k", nil, nil); err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("wrong credentials: %v, want an error that names the credentials", err)
	}
	// Unreachable endpoint.
	gone, _ := s3store.OpenBackend(ctx, "b", &s3store.Options{Endpoint: "http://127.0.0.1:1", PathStyle: true, AccessKeyID: "a", SecretAccessKey: "b"})
	if _, err := objstore.New(gone, nil).Head(ctx, "k"); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("unreachable endpoint: %v, want 'cannot reach'", err)
	}
}
