package objstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// identified is a backend that must be probed and names its server, like s3;
// it counts the probe's scratch writes (under any key prefix).
type identified struct {
	objstore.Backend
	endpoint string

	mu      sync.Mutex
	server  string
	scratch int // the probe's scratch writes
	checks  int // the writes of stillEnforced's check of a saved verdict
}

func (b *identified) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{}, false
}

func (b *identified) ServerLocation() objstore.ServerLocation {
	return objstore.ServerLocation{Endpoint: b.endpoint, Bucket: "bucket"}
}

func (b *identified) ServerSoftware(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.server, nil
}

func (b *identified) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	// (Under a key prefix when the backend is wrapped in one.)
	if strings.Contains(key, "cairn-probe/") && !strings.HasSuffix(key, "cairn-probe/verdict.json") {
		b.mu.Lock()
		if strings.HasSuffix(key, "/verdict-check") {
			b.checks++ // a saved verdict's check, not a probe
		} else {
			b.scratch++
		}
		b.mu.Unlock()
	}
	return b.Backend.Put(ctx, key, body, size, opts)
}

func (b *identified) checkWrites() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.checks
	b.checks = 0
	return n
}

func (b *identified) scratchWrites() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.scratch
	b.scratch = 0
	return n
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A write that needs the capabilities probes once; later Stores for the same
// server reuse the saved verdict until it is older than the TTL or the server
// calls itself something else. Reads never probe.
func TestProbeVerdictSavedAndReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := &identified{Backend: mem.OpenBackend("verdicts"), endpoint: "http://s3.example:9000", server: "MinIO"}
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	open := func() *objstore.Store {
		return objstore.New(b, &objstore.Options{ProbeCacheDir: dir, Now: clk.Now})
	}
	write := func(key string) {
		t.Helper()
		if _, err := open().PutBytes(ctx, key, []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
			t.Fatal(err)
		}
	}

	s := open()
	if _, err := s.PutBytes(ctx, "plain", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetBytes(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListAll(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if n := b.scratchWrites(); n != 0 {
		t.Fatalf("reads and an unconditional write probed (%d scratch writes)", n)
	}
	if _, ok := s.KnownCapabilities(); ok {
		t.Fatal("capabilities known before any probe")
	}

	write("a")
	if b.scratchWrites() == 0 {
		t.Fatal("the first conditional write did not probe")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("verdict files %v, want one", files)
	}
	var v objstore.ProbeVerdict
	data, _ := os.ReadFile(files[0])
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.Endpoint != b.endpoint || v.Bucket != "bucket" || v.Server != "MinIO" || !v.ProbedAt.Equal(clk.Now()) || !v.Report.Capabilities.ConditionalWrites() {
		t.Errorf("saved verdict %+v", v)
	}
	if keys, _ := objstore.New(b, nil).ListAll(ctx, "cairn-probe/", nil); len(keys) != 0 {
		t.Errorf("a probe a write needed left %v in the bucket", keys)
	}

	clk.add(23 * time.Hour)
	b.checkWrites()
	write("b")
	if n := b.scratchWrites(); n != 0 {
		t.Errorf("a second Store probed again (%d scratch writes) with a 23h-old verdict", n)
	}
	// The check before reuse: one write of the scratch key, then the refused
	// create and the refused If-Match write.
	if n := b.checkWrites(); n != 3 {
		t.Errorf("reusing the verdict checked it with %d writes, want 3", n)
	}

	b.mu.Lock()
	b.server = "SomethingElse"
	b.mu.Unlock()
	write("c")
	if b.scratchWrites() == 0 {
		t.Error("other software answers at the endpoint, and the old verdict was used")
	}

	clk.add(25 * time.Hour)
	write("d")
	if b.scratchWrites() == 0 {
		t.Error("a verdict older than the TTL was used")
	}
	write("e")
	if n := b.scratchWrites(); n != 0 {
		t.Errorf("the refreshed verdict was not reused (%d scratch writes)", n)
	}

	// Probe always probes; NoCache saves nothing.
	before, _ := os.ReadFile(files[0])
	clk.add(time.Hour)
	if _, err := open().Probe(ctx, &objstore.ProbeOptions{NoCache: true}); err != nil {
		t.Fatal(err)
	}
	if b.scratchWrites() == 0 {
		t.Error("Probe did not probe")
	}
	if after, _ := os.ReadFile(files[0]); string(after) != string(before) {
		t.Error("Probe with NoCache rewrote the saved verdict")
	}
	rep, err := open().Probe(ctx, &objstore.ProbeOptions{Share: true})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(files[0]); string(after) == string(before) {
		t.Error("Probe did not refresh the saved verdict")
	}
	if rep.PreviousShared != nil {
		t.Errorf("PreviousShared = %+v with nothing shared before", rep.PreviousShared)
	}
	if _, _, err := objstore.New(b, nil).GetBytes(ctx, "cairn-probe/verdict.json"); err != nil {
		t.Errorf("Probe with Share did not publish the verdict: %v", err)
	}
	if rep, err = open().Probe(ctx, &objstore.ProbeOptions{Share: true}); err != nil {
		t.Fatal(err)
	}
	if rep.PreviousShared == nil || len(rep.PreviousShared.Disagree) != 0 || rep.PreviousShared.Server != "SomethingElse" {
		t.Errorf("PreviousShared = %+v, want the earlier agreeing verdict", rep.PreviousShared)
	}

	// A negative TTL: nothing saved, nothing reused.
	dir2 := t.TempDir()
	for range 2 {
		s := objstore.New(b, &objstore.Options{ProbeCacheDir: dir2, ProbeTTL: -1})
		if _, err := s.PutBytes(ctx, "f", []byte("x"), &objstore.PutOptions{If: objstore.IfMatch("0123")}); !errors.Is(err, objstore.ErrPreconditionFailed) && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("if-match on a missing key: %v", err)
		}
		if b.scratchWrites() == 0 {
			t.Error("ProbeTTL -1 reused a verdict")
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir2, "*")); len(files) != 0 {
		t.Errorf("ProbeTTL -1 saved %v", files)
	}
}

// A verdict in the bucket is never taken in place of a probe: a forged one
// claiming that a server which ignores conditions enforces them is
// overruled, and the probe names where it disagreed.
func TestSharedVerdictIsNotTrusted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("forged")
	b := &identified{Backend: faulty.New(inner, &faulty.Options{IgnoreConditions: true}), endpoint: "http://ignorant:9000", server: "Ignorant"}
	all := objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true, CopyIfAbsent: true, CopyIfMatch: true, MultipartIfAbsent: true, MultipartIfMatch: true}
	var checks []objstore.ProbeCheck
	for _, n := range objstore.ProbeCheckNames() {
		checks = append(checks, objstore.ProbeCheck{Name: n, Enforced: true})
	}
	forged := objstore.ProbeVerdict{Format: 1, ServerLocation: b.ServerLocation(), Server: "Ignorant", ProbedAt: time.Now(),
		Report: objstore.ProbeReport{Store: "forged", Capabilities: all, Checks: checks}}
	data, _ := json.Marshal(forged)
	forge := func() {
		t.Helper()
		if _, err := objstore.New(inner, nil).PutBytes(ctx, "cairn-probe/verdict.json", data, nil); err != nil {
			t.Fatal(err)
		}
	}
	forge()
	s := objstore.New(b, &objstore.Options{ProbeCacheDir: t.TempDir()})
	_, err := s.PutBytes(ctx, "k", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrNotSupported) {
		t.Fatalf("if-absent put on a server that ignores conditions, with a forged shared verdict: %v, want ErrNotSupported", err)
	}
	forge()
	rep, err := s.Probe(ctx, &objstore.ProbeOptions{Share: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PreviousShared == nil || !slices.Contains(rep.PreviousShared.Disagree, "put-if-absent") {
		t.Errorf("PreviousShared = %+v, want a disagreement on put-if-absent", rep.PreviousShared)
	}
}

func TestProbeCheckNames(t *testing.T) {
	t.Parallel()
	rep, err := objstore.Probe(context.Background(), mem.Open(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range rep.Checks {
		got = append(got, c.Name)
	}
	if !slices.Equal(got, objstore.ProbeCheckNames()) {
		t.Errorf("Probe ran %v; ProbeCheckNames says %v", got, objstore.ProbeCheckNames())
	}
}

func TestProbeFailureMatchesErrProbeFailed(t *testing.T) {
	t.Parallel()
	b := faulty.New(mem.OpenBackend("probe-failed"), &faulty.Options{IgnoreConditions: true, FailRate: 1, Ops: []faulty.Op{faulty.OpPut}})
	_, err := objstore.Probe(context.Background(), objstore.New(b, nil), nil)
	if !errors.Is(err, objstore.ErrProbeFailed) || !errors.Is(err, faulty.ErrInjected) {
		t.Errorf("Probe with failing writes: %v, want ErrProbeFailed wrapping the cause", err)
	}
}

// A saved verdict never vouches for another server at the same address: the
// software answering there now (one that ignores conditions, giving the same
// Server header, as a proxy in front of the old server would) is caught by
// the check before reuse, and probed again. It used to be trusted because the
// Server header had not changed.
func TestSavedVerdictCheckedBeforeReuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := faulty.New(mem.OpenBackend("swapped"), nil)
	b := &identified{Backend: server, endpoint: "http://127.0.0.1:9000", server: "SameName"}
	dir := t.TempDir()
	open := func() *objstore.Store { return objstore.New(b, &objstore.Options{ProbeCacheDir: dir}) }
	if _, err := open().PutBytes(ctx, "first", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
		t.Fatal(err)
	}
	if b.scratchWrites() == 0 {
		t.Fatal("the first conditional write did not probe")
	}
	server.SetOptions(faulty.Options{IgnoreConditions: true})
	_, err := open().PutBytes(ctx, "second", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrNotSupported) {
		t.Errorf("if-absent put after the server behind the address began to ignore conditions: %v, want ErrNotSupported", err)
	}
	if b.scratchWrites() == 0 {
		t.Error("the saved verdict was reused for a server that ignores what it claims")
	}
	if b.checkWrites() == 0 {
		t.Error("the saved verdict was not checked before reuse")
	}
}

// A server that cannot be identified (no Server header, nothing else that
// names it) gets no saved verdict: every Store probes it.
func TestUnidentifiedServerIsAlwaysProbed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &identified{Backend: mem.OpenBackend("anonymous"), endpoint: "http://127.0.0.1:9001", server: ""}
	dir := t.TempDir()
	for i := range 2 {
		s := objstore.New(b, &objstore.Options{ProbeCacheDir: dir})
		if _, err := s.PutBytes(ctx, fmt.Sprint("k", i), []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()}); err != nil {
			t.Fatal(err)
		}
		if b.scratchWrites() == 0 {
			t.Errorf("store %d reused a verdict for a server that cannot be identified", i)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) != 0 {
		t.Errorf("verdicts saved for a server that cannot be identified: %v", files)
	}
}
