package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// switchProxy is a TCP proxy at one fixed 127.0.0.1 address whose target can
// be switched: what a load balancer or a port forward in front of a replaced
// server looks like to a client.
type switchProxy struct {
	addr   string
	ln     net.Listener
	target atomic.Value // host:port
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]bool{}}
	p.target.Store(target)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *switchProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *switchProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target.Load().(string))
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			in.Close()
			out.Close()
			return
		}
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

func (p *switchProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// anonymous starts an HTTP proxy in front of target that makes its server
// look like one that gives no name: no Server header (as Ceph RGW and s3rver
// answer), and, on HEAD of a bucket (what cairn asks a server who it is),
// no x- headers but x-amz-request-id and x-amz-id-2. Two servers behind it
// identify themselves alike, so only what they do tells them apart.
func anonymous(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // keep the signed Host header
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Server")
			req := resp.Request
			if req.Method == http.MethodHead && strings.Count(strings.Trim(req.URL.Path, "/"), "/") == 0 {
				for name := range resp.Header {
					n := strings.ToLower(name)
					if strings.HasPrefix(n, "x-") && n != "x-amz-request-id" && n != "x-amz-id-2" {
						resp.Header.Del(name)
					}
				}
				for _, n := range []string{"X-Amz-Request-Id", "X-Amz-Id-2"} {
					if resp.Header.Get(n) == "" {
						resp.Header.Set(n, "0")
					}
				}
			}
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	return srv.URL
}

// headBucket returns the header of a HEAD of the bucket through base.
func headBucket(t *testing.T, base, bucket string) http.Header {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodHead, base+"/"+bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header
}

func xNames(h http.Header) []string {
	var names []string
	for n := range h {
		if strings.HasPrefix(strings.ToLower(n), "x-") || strings.EqualFold(n, "Server") {
			names = append(names, strings.ToLower(n))
		}
	}
	slices.Sort(names)
	return names
}

// A saved probe verdict never vouches for another server (issue 33, item 5).
// One fixed address forwards to MinIO, which enforces If-None-Match, and
// cairn saves that verdict; then the address forwards to a server that
// ignores conditions (gofakes3 behind a header-stripping proxy), which
// identifies itself exactly as the first did (no Server header, the same x-
// headers: what Ceph RGW or s3rver swapped for one another look like). Of 8
// concurrent `cairn put --if-absent` of one key, at most one may succeed;
// the others exit 3 or refuse because the server does not enforce the
// condition. All 8 used to exit 0, on the first server's verdict.
func TestSavedVerdictDoesNotVouchForAnotherServer(t *testing.T) {
	t.Parallel()
	minio := testenv.S3(t)
	fakes := testenv.S3Server(t, "gofakes3")
	b, _ := testenv.NewBucket(t, minio)
	bucket := strings.TrimPrefix(strings.Fields(b.String())[0], "s3://")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fb, err := s3store.OpenBackend(ctx, bucket, &s3store.Options{Endpoint: fakes.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: fakes.AccessKey, SecretAccessKey: fakes.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	strip, err := faultproxy.New(fakes.URL, faultproxy.Options{StripConditions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(strip.Close)
	first, second := anonymous(t, minio.URL), anonymous(t, strip.URL)
	if a, b := xNames(headBucket(t, first, bucket)), xNames(headBucket(t, second, bucket)); !slices.Equal(a, b) {
		t.Fatalf("the two servers do not identify alike (%v, %v): the test would not test the check of a saved verdict", a, b)
	}
	hostport := func(u string) string { return strings.TrimPrefix(u, "http://") }
	proxy := newSwitchProxy(t, hostport(first))

	dir := t.TempDir()
	env := append(minio.Env(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	store := fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&path_style=true", bucket, proxy.addr)
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBin(t, dir, env, "put", file, objectURL(store, "once.txt"), "--if-absent"); code != 0 {
		t.Fatalf("put --if-absent on MinIO: exit %d %s", code, stderr)
	}
	if code, _, stderr := runBin(t, dir, env, "put", file, objectURL(store, "once.txt"), "--if-absent"); code != cli.ExitPrecondition {
		t.Fatalf("a second put --if-absent on MinIO: exit %d %s, want 3", code, stderr)
	}
	if _, v := verdictOf(t, filepath.Join(dir, "cache")); !v.Report.Capabilities.PutIfAbsent {
		t.Fatalf("MinIO's saved verdict: %+v", v)
	}

	proxy.target.Store(hostport(second))
	const writers = 8
	type outcome struct {
		code   int
		stderr string
	}
	outcomes := make([]outcome, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			code, _, stderr := runBin(t, dir, env, "put", file, objectURL(store, "race.txt"), "--if-absent")
			outcomes[i] = outcome{code, stderr}
		})
	}
	wg.Wait()
	wins := 0
	for i, o := range outcomes {
		switch {
		case o.code == 0:
			wins++
		case o.code == cli.ExitPrecondition, strings.Contains(o.stderr, "not enforce"):
		default:
			t.Errorf("writer %d: exit %d %q, want 0, 3 or a refusal saying the server does not enforce the condition", i, o.code, o.stderr)
		}
	}
	if wins > 1 {
		t.Errorf("%d of %d concurrent put --if-absent of one key succeeded on a server that ignores If-None-Match: the saved verdict of another server was trusted", wins, writers)
	}
	if _, v := verdictOf(t, filepath.Join(dir, "cache")); v.Report.Capabilities.PutIfAbsent {
		t.Errorf("after the swap the saved verdict still says put-if-absent is enforced: %+v", v.Report.Capabilities)
	}
}
