package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// putTestBackend is a memory store that can hide its capabilities (as an S3
// store not yet probed does), counts what it is sent, and can lose the
// response to the first conditional PUT after applying it.
type putTestBackend struct {
	*mem.Backend
	undeclared  bool
	loseFirst   atomic.Bool
	interfere   atomic.Bool  // another writer replaces the key before each conditional PUT
	probeWrites atomic.Int64 // PUTs under cairn-probe/
	condPuts    atomic.Int64
}

func (b *putTestBackend) Capabilities() (objstore.Capabilities, bool) {
	if b.undeclared {
		return objstore.Capabilities{}, false
	}
	return b.Backend.Capabilities()
}

func (b *putTestBackend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if strings.HasPrefix(key, "cairn-probe/") {
		b.probeWrites.Add(1)
	}
	if opts.If.IsZero() {
		return b.Backend.Put(ctx, key, body, size, opts)
	}
	b.condPuts.Add(1)
	if b.interfere.Load() {
		other := fmt.Sprintf("other %d", b.condPuts.Load()) // new bytes each time: a new ETag
		if _, err := b.Backend.Put(ctx, key, strings.NewReader(other), int64(len(other)), objstore.PutOptions{}); err != nil {
			return objstore.Info{}, err
		}
	}
	info, err := b.Backend.Put(ctx, key, body, size, opts)
	if err == nil && b.loseFirst.CompareAndSwap(true, false) {
		return objstore.Info{}, fmt.Errorf("connection reset after the request was sent: %w", objstore.ErrAmbiguous)
	}
	return info, err
}

var (
	registerPutTest sync.Once
	putTestBackends sync.Map // host -> *putTestBackend
)

func putTestStore(t *testing.T, undeclared, loseFirst bool) (*putTestBackend, string) {
	registerPutTest.Do(func() {
		objstore.Register("puttest", func(_ context.Context, u *url.URL) (objstore.Backend, error) {
			b, ok := putTestBackends.Load(u.Host)
			if !ok {
				return nil, fmt.Errorf("no test backend %q", u.Host)
			}
			return b.(*putTestBackend), nil
		})
	})
	host := testenv.UniqueName("puttest")
	b := &putTestBackend{Backend: mem.OpenBackend(host), undeclared: undeclared}
	b.loseFirst.Store(loseFirst)
	putTestBackends.Store(host, b)
	return b, "puttest://" + host
}

func runStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// A plain put never probes (the probe and a saved verdict's check write
// scratch objects under cairn-probe/): where the store's capabilities are not
// known without a request, it checks the mark with a HEAD and writes without
// a condition, as before marks were checked.
func TestPlainPutNeverProbes(t *testing.T) {
	t.Parallel()
	b, store := putTestStore(t, true, false)
	f := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(f, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if code, _, stderr := run(t, "put", f, store+"/out/x.txt"); code != 0 {
			t.Fatalf("plain put: exit %d %q", code, stderr)
		}
	}
	if n := b.probeWrites.Load(); n != 0 || b.condPuts.Load() != 0 {
		t.Fatalf("a plain put wrote %d probe objects and sent %d conditional PUTs; want none", n, b.condPuts.Load())
	}
	// It still refuses a fenced object it can see.
	if _, err := fence.PutBytes(context.Background(), objstore.New(b.Backend, nil), "out/x.txt", []byte("held\n"), 6, nil); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "put", f, store+"/out/x.txt"); code != cli.ExitPrecondition || !strings.Contains(stderr, "is fenced (highest token 6)") {
		t.Fatalf("plain put over a fenced object: exit %d %q", code, stderr)
	}
}

// A guarded plain put whose response was lost (a reset, a 503 the SDK does
// not retry under a condition) is not an error for a file: it reads the
// object and sends the file again on what is there now. Stdin cannot be sent
// again: it says the outcome is unknown.
func TestGuardedPutSettlesALostResponse(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(f, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, existing := range []bool{false, true} {
		b, store := putTestStore(t, false, true)
		if existing {
			if _, err := objstore.New(b.Backend, nil).PutBytes(ctx, "out/x.txt", []byte("old\n"), nil); err != nil {
				t.Fatal(err)
			}
		}
		if code, _, stderr := run(t, "put", f, store+"/out/x.txt"); code != 0 {
			t.Fatalf("existing %v: a file put whose response was lost: exit %d %q; want it sent again", existing, code, stderr)
		}
		if body, _, err := objstore.New(b.Backend, nil).GetBytes(ctx, "out/x.txt"); err != nil || string(body) != "plain\n" || b.condPuts.Load() != 2 {
			t.Fatalf("existing %v: object %q %v after %d conditional PUTs", existing, body, err, b.condPuts.Load())
		}
	}
	_, store := putTestStore(t, false, true)
	code, _, stderr := runStdin(t, "from stdin\n", "put", "-", store+"/out/y.txt")
	if code == 0 || !strings.Contains(stderr, "whether it landed is not known") || strings.Contains(stderr, "replaced by another writer") {
		t.Fatalf("stdin put whose response was lost: exit %d %q; want the outcome reported unknown", code, stderr)
	}
}

// A plain put that runs out of --retries against other writers says so, not
// that a condition the user never set failed.
func TestGuardedPutOutOfRetries(t *testing.T) {
	t.Parallel()
	b, store := putTestStore(t, false, false)
	b.interfere.Store(true)
	f := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(f, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "put", f, store+"/out/x.txt", "--retries", "2")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "replaced by other writers during each of 3 uploads") || strings.Contains(stderr, "If-") {
		t.Fatalf("plain put out of retries: exit %d %q", code, stderr)
	}
}

// Put over a fenced document erases its mark no more than over a fenced
// object: a plain put refuses it (exit 3), --unfenced carries its mark on
// into the object's metadata, and a stale token is refused after either.
func TestPutOverAFencedDocument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, store := putTestStore(t, false, false)
	s := objstore.New(b.Backend, nil)
	d := docstore.New(s, nil)
	if _, _, err := fence.Update(ctx, d, "state.json", 5, func(v *map[string]int, _ fence.DocMeta) error {
		*v = map[string]int{"count": 2}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(f, []byte(`{"count":9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "put", f, store+"/state.json"); code != cli.ExitPrecondition || !strings.Contains(stderr, "state.json is a fenced document (highest token 5)") {
		t.Fatalf("plain put over a fenced document: exit %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "put", f, store+"/state.json", "--fence-token", "3"); code != cli.ExitPrecondition || !strings.Contains(stderr, "fencing token 3 is lower than token 5") {
		t.Fatalf("put --fence-token 3 over a document fenced by 5: exit %d %q", code, stderr)
	}
	if _, m, err := fence.Load[map[string]int](ctx, d, "state.json"); err != nil || m.Token != 5 {
		t.Fatalf("document after the refusals: token %d %v", m.Token, err)
	}
	if code, _, stderr := run(t, "put", f, store+"/state.json", "--unfenced"); code != 0 {
		t.Fatalf("put --unfenced over a fenced document: exit %d %q", code, stderr)
	}
	if tok, err := fence.Token(ctx, s, "state.json"); err != nil || tok != 5 {
		t.Fatalf("mark after put --unfenced: %d %v, want 5", tok, err)
	}
	if code, _, stderr := run(t, "put", f, store+"/state.json", "--fence-token", "3"); code != cli.ExitPrecondition {
		t.Fatalf("put --fence-token 3 after put --unfenced: exit %d %q", code, stderr)
	}
	// And back: a document update over the object is judged by its mark.
	if code, _, stderr := run(t, "doc", "update", store+"/state.json", "--set", "count=1", "--fence-token", "4"); code != cli.ExitPrecondition || !strings.Contains(stderr, "lower than token 5") {
		t.Fatalf("doc update --fence-token 4 over an object fenced by 5: exit %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "doc", "update", store+"/state.json", "--set", "count=1"); code != cli.ExitPrecondition || !strings.Contains(stderr, "highest token 5") {
		t.Fatalf("doc update without a token over an object fenced by 5: exit %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "doc", "update", store+"/state.json", "--set", "count=1", "--unfenced"); code != 0 {
		t.Fatalf("doc update --unfenced over an object fenced by 5: exit %d %q", code, stderr)
	}
	if _, m, err := fence.Load[map[string]int](ctx, d, "state.json"); err != nil || m.Token != 5 {
		t.Fatalf("document after doc update --unfenced: token %d %v, want 5", m.Token, err)
	}
}

// doc get prints a byte or non-JSON document as stored (it has no wrapper),
// and --json carries it in value_base64; a fenced document's value as before.
func TestDocGetBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, store := putTestStore(t, false, false)
	s := objstore.New(b.Backend, nil)
	d := docstore.New(s, nil)
	if _, err := d.CreateBytes(ctx, "notes.txt", []byte("line one\nnot JSON\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(ctx, "plain.txt", []byte("uploaded\n"), nil); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"notes.txt": "line one\nnot JSON\n", "plain.txt": "uploaded\n"} {
		code, stdout, stderr := run(t, "doc", "get", store+"/"+key)
		if code != 0 || stdout != want+"\n" {
			t.Errorf("doc get %s: exit %d %q %q, want %q", key, code, stdout, stderr, want)
		}
		code, stdout, _ = run(t, "doc", "get", store+"/"+key, "--json")
		var out struct {
			ValueBase64 []byte `json:"value_base64"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || string(out.ValueBase64) != want {
			t.Errorf("doc get %s --json: exit %d %q", key, code, stdout)
		}
	}
}
