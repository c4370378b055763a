package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// The testers' sequences (issue 33 item 4), through the binary, on the
// directory store and on MinIO: a write without --fence-token neither erases
// nor lowers a fence's mark, and doc get prints the value, not the wrapper.
func TestFenceMarkSurvivesWritersWithoutAToken(t *testing.T) {
	t.Parallel()
	t.Run("dir", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if code, _, stderr := runBin(t, dir, nil, "probe", dir); code != 0 { // makes dir a store (.cairn/)
			t.Fatal(stderr)
		}
		fenceMarkSequences(t, func(key string) string { return "file://" + dir + "/" + key }, nil,
			func(t *testing.T) *objstore.Store {
				s, err := objstore.Open(context.Background(), "file://"+dir, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
	})
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		ep := testenv.S3(t)
		b, raw := testenv.NewBucket(t, ep)
		u, _ := objstore.ParseURL(raw)
		at := func(key string) string { return "s3://" + u.Host + "/" + key + "?" + u.RawQuery }
		fenceMarkSequences(t, at, ep.Env(), func(*testing.T) *objstore.Store { return objstore.New(b, nil) })
	})
}

func fenceMarkSequences(t *testing.T, at func(key string) string, env []string, open func(*testing.T) *objstore.Store) {
	dir := t.TempDir()
	for _, f := range []string{"A", "B", "C", "D"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("from "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	obj, doc, plain := at("out/report.txt"), at("out/state.json"), at("out/plain.json")
	steps := []struct {
		args []string
		code int
		want string // in stderr (or stdout when code is 0)
	}{
		// Objects.
		{[]string{"put", "A", obj, "--fence-token", "6"}, 0, ""},
		{[]string{"put", "B", obj}, cli.ExitPrecondition, "out/report.txt is fenced (highest token 6): pass --fence-token, or --unfenced"},
		{[]string{"put", "C", obj, "--fence-token", "2"}, cli.ExitPrecondition, "fencing token 2 is lower than token 6"},
		{[]string{"put", "B", obj, "--if-match", "x"}, cli.ExitPrecondition, "is fenced (highest token 6)"},
		{[]string{"put", "B", obj, "--retry-on-change"}, cli.ExitPrecondition, "is fenced (highest token 6)"},
		{[]string{"put", "B", obj, "--unfenced", "--fence-token", "7"}, cli.ExitUsage, "exclude each other"},
		{[]string{"put", "B", obj, "--unfenced", "--if-absent"}, cli.ExitUsage, "drop --if-absent"},
		{[]string{"put", "B", obj, "--unfenced"}, 0, ""},
		{[]string{"put", "C", obj, "--fence-token", "2"}, cli.ExitPrecondition, "fencing token 2 is lower than token 6"},
		{[]string{"put", "D", at("out/other.txt")}, 0, ""}, // plain objects stay plain
		{[]string{"put", "D", at("out/other.txt")}, 0, ""},
		// Documents.
		{[]string{"doc", "update", doc, "--create", "--set", "count=2", "--fence-token", "5"}, 0, ""},
		{[]string{"doc", "update", doc, "--set", "count=9"}, cli.ExitPrecondition, "out/state.json is fenced (highest token 5): pass --fence-token, or --unfenced"},
		{[]string{"doc", "get", doc}, 0, `"count": 2`},
		{[]string{"doc", "update", doc, "--set", "count=6", "--fence-token", "6"}, 0, ""},
		{[]string{"doc", "update", doc, "--set", "cairn_fence=1"}, cli.ExitPrecondition, "is fenced (highest token 6)"},
		{[]string{"doc", "update", doc, "--set", "count=3", "--fence-token", "2"}, cli.ExitPrecondition, "fencing token 2 is lower than token 6"},
		{[]string{"doc", "update", doc, "--set", "count=9", "--unfenced"}, 0, ""},
		{[]string{"doc", "update", doc, "--set", "cairn_fence=1", "--unfenced"}, 0, ""}, // a field of the value
		{[]string{"doc", "update", doc, "--set", "count=3", "--fence-token", "2"}, cli.ExitPrecondition, "fencing token 2 is lower than token 6"},
		{[]string{"doc", "update", doc, "--set", "count=3", "--unfenced", "--fence-token", "7"}, cli.ExitUsage, "exclude each other"},
		{[]string{"doc", "update", plain, "--create", "--set", "cairn_fence=1"}, cli.ExitUsage, "reserved for the fencing token"},
		{[]string{"doc", "update", plain, "--create", "--set", "n=1"}, 0, ""},
		{[]string{"doc", "update", plain, "--set", "n=2"}, 0, ""}, // plain documents stay plain
	}
	for _, c := range steps {
		code, stdout, stderr := runBin(t, dir, env, c.args...)
		out := stderr
		if c.code == 0 {
			out = stdout
		}
		if code != c.code || !strings.Contains(out, c.want) { // every step is reported: each is one of the testers' findings
			t.Errorf("cairn %q: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, stdout, stderr, c.code, c.want)
		}
	}

	ctx := context.Background()
	s := open(t)
	body, m, err := fence.Get(ctx, s, "out/report.txt")
	if err != nil || string(body) != "from B\n" || m.Token != 6 {
		t.Errorf("object: %q token %d %v; want B's bytes with token 6", body, m.Token, err)
	}
	if tok, _ := fence.Token(ctx, s, "out/other.txt"); tok != -1 {
		t.Errorf("a plain object gained token %d", tok)
	}
	v, dm, err := fence.Load[map[string]int](ctx, docstore.New(s, nil), "out/state.json")
	if err != nil || v["count"] != 9 || v["cairn_fence"] != 1 || len(v) != 2 || dm.Token != 6 {
		t.Errorf("document: %v token %d %v; want count 9 and the value's own cairn_fence 1, token 6", v, dm.Token, err)
	}

	// doc get prints the value; --json adds the mark; --raw the stored form.
	code, stdout, stderr := runBin(t, dir, env, "doc", "get", doc)
	var got map[string]int
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got["count"] != 9 || len(got) != 2 {
		t.Errorf("doc get: exit %d %q %q; want the value", code, stdout, stderr)
	}
	code, stdout, _ = runBin(t, dir, env, "doc", "get", doc, "--json")
	var gj struct {
		Value      map[string]int `json:"value"`
		FenceToken *int64         `json:"fence_token"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &gj) != nil || gj.Value["count"] != 9 || gj.FenceToken == nil || *gj.FenceToken != 6 {
		t.Errorf("doc get --json: exit %d %q", code, stdout)
	}
	code, stdout, _ = runBin(t, dir, env, "doc", "get", doc, "--raw", "--json")
	var gr struct {
		Value fence.Fenced[map[string]int] `json:"value"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &gr) != nil || gr.Value.Fence != 6 || gr.Value.Value["count"] != 9 {
		t.Errorf("doc get --raw --json: exit %d %q", code, stdout)
	}
	code, stdout, _ = runBin(t, dir, env, "doc", "get", plain, "--json")
	if code != 0 || strings.Contains(stdout, "fence_token") || !strings.Contains(stdout, `"value":{"n":2}`) {
		t.Errorf("doc get --json of a plain document: exit %d %q", code, stdout)
	}
	if init := filepath.Join(dir, "forged.json"); os.WriteFile(init, []byte(`{"cairn_fence": 99, "value": 1}`), 0o644) == nil {
		if code, _, stderr := runBin(t, dir, env, "doc", "create", at("out/forged.json"), "--file", init); code != cli.ExitUsage || !strings.Contains(stderr, "reserved") {
			t.Errorf("doc create of a value forging a mark: exit %d %q", code, stderr)
		}
	}
}

// racyBackend lands a fenced write (token 6) just before the first write
// that is not fence's own, as a holder would between a plain put's read and
// its write.
type racyBackend struct {
	objstore.Backend
	once sync.Once
}

func (r *racyBackend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if _, own := opts.Metadata[fence.MetaNonce]; !own {
		var err error
		r.once.Do(func() {
			_, err = fence.PutBytes(ctx, objstore.New(r.Backend, nil), key, []byte("the holder's\n"), 6, nil)
		})
		if err != nil {
			return objstore.Info{}, err
		}
	}
	return r.Backend.Put(ctx, key, body, size, opts)
}

var registerRacy sync.Once

// A fenced write that lands between a plain put's read and its write is
// never overwritten: the put is conditional on the version it judged, reads
// again, and refuses the now-fenced object (a plain PUT erased its mark).
func TestPlainPutDoesNotEraseAMarkLandingMeanwhile(t *testing.T) {
	t.Parallel()
	registerRacy.Do(func() {
		objstore.Register("fencerace", func(_ context.Context, u *url.URL) (objstore.Backend, error) {
			return racyBackends.get(u.Host), nil
		})
	})
	for _, name := range []string{"missing", "plain"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			host := testenv.UniqueName("race-" + name)
			rb := racyBackends.get(host)
			ctx := context.Background()
			if name == "plain" {
				if _, err := objstore.New(rb.Backend, nil).PutBytes(ctx, "out/x.txt", []byte("old\n"), nil); err != nil {
					t.Fatal(err)
				}
			}
			f := filepath.Join(t.TempDir(), "f.txt")
			if err := os.WriteFile(f, []byte("plain writer's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := run(t, "put", f, "fencerace://"+host+"/out/x.txt")
			if code != cli.ExitPrecondition || !strings.Contains(stderr, "is fenced (highest token 6)") {
				t.Errorf("plain put while a holder wrote: exit %d %q; want exit 3, fenced", code, stderr)
			}
			body, m, err := fence.Get(ctx, objstore.New(rb.Backend, nil), "out/x.txt")
			if err != nil || string(body) != "the holder's\n" || m.Token != 6 {
				t.Fatalf("object: %q token %d %v; want the holder's write with token 6", body, m.Token, err)
			}
		})
	}
}

type racyRegistry struct {
	mu sync.Mutex
	m  map[string]*racyBackend
}

var racyBackends racyRegistry

func (r *racyRegistry) get(name string) *racyBackend {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*racyBackend{}
	}
	if b, ok := r.m[name]; ok {
		return b
	}
	b := &racyBackend{Backend: mem.OpenBackend(name)}
	r.m[name] = b
	return b
}

// blindBackend refuses every HEAD, as a store does to write-only
// credentials.
type blindBackend struct{ objstore.Backend }

func (blindBackend) Head(context.Context, string) (objstore.Info, error) {
	return objstore.Info{}, errors.New("403 Forbidden")
}

var registerBlind sync.Once
var blindBackends sync.Map // name -> *mem.Backend

// A plain put that may not read the key cannot tell whether it carries a
// mark: where the store enforces conditional writes it only creates the key,
// and refuses an existing one rather than erase a mark it cannot see.
func TestPlainPutThatCannotReadOnlyCreates(t *testing.T) {
	t.Parallel()
	registerBlind.Do(func() {
		objstore.Register("fenceblind", func(_ context.Context, u *url.URL) (objstore.Backend, error) {
			b, _ := blindBackends.LoadOrStore(u.Host, mem.OpenBackend(u.Host))
			return blindBackend{b.(*mem.Backend)}, nil
		})
	})
	host := testenv.UniqueName("blind")
	b, _ := blindBackends.LoadOrStore(host, mem.OpenBackend(host))
	s := objstore.New(b.(*mem.Backend), nil)
	ctx := context.Background()
	if _, err := fence.PutBytes(ctx, s, "out/x.txt", []byte("the holder's\n"), 6, nil); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(f, []byte("plain writer's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "put", f, "fenceblind://"+host+"/out/x.txt")
	if code != cli.ExitPrecondition || !strings.Contains(stderr, "exists, and reading it to tell whether it carries a fencing mark failed") {
		t.Errorf("plain put over a fenced object it cannot read: exit %d %q; want exit 3", code, stderr)
	}
	if body, m, err := fence.Get(ctx, s, "out/x.txt"); err != nil || string(body) != "the holder's\n" || m.Token != 6 {
		t.Errorf("object: %q token %d %v; want the holder's write with token 6", body, m.Token, err)
	}
	if code, _, stderr := run(t, "put", f, "fenceblind://"+host+"/out/new.txt"); code != 0 {
		t.Errorf("plain put of a new key it cannot read: exit %d %q", code, stderr)
	}
}
