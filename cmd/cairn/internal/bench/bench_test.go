package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) {
	// The child side of TestDocsProcesses: one docs worker process.
	if os.Getenv("CAIRN_BENCH_DOCS_WORKER") != "" {
		os.Exit(docsWorkerMain(os.Args[1:]))
	}
	testmain.Run(m)
}

func memStore(t *testing.T) *objstore.Store {
	t.Helper()
	s := objstore.New(mem.OpenBackend(""), nil)
	t.Cleanup(func() { s.Close() })
	return s
}

func fsStore(t *testing.T) (*objstore.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := fsstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func countUnder(t *testing.T, s *objstore.Store, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range s.List(context.Background(), prefix, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// checkResults: every result has a name, a unit, both figures and the ratio
// of the two.
func checkResults(t *testing.T, rs []bench.Result, want int) {
	t.Helper()
	if len(rs) != want {
		t.Fatalf("%d results, want %d: %+v", len(rs), want, rs)
	}
	for _, r := range rs {
		if r.Name == "" || r.Unit == "" || r.Baseline <= 0 || r.Cairn <= 0 {
			t.Errorf("incomplete result %+v", r)
		}
		if got := r.Cairn / r.Baseline; got != r.Ratio {
			t.Errorf("%s: ratio %v, want cairn/baseline %v", r.Name, r.Ratio, got)
		}
	}
}

// Audit removes the objects it wrote, and says so (it left them all behind).
func TestAuditRemovesItsObjects(t *testing.T) {
	t.Parallel()
	s, dir := fsStore(t)
	var progress bytes.Buffer
	rs, err := bench.Audit(t.Context(), bench.AuditOptions{Store: s, StoreURL: dir, Objects: 40, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 1)
	if !strings.HasPrefix(rs[0].Name, "audit of 40 objects") || !rs[0].Lower {
		t.Errorf("result %+v", rs[0])
	}
	if n := countUnder(t, s, "cairn-bench-audit/"); n != 0 {
		t.Errorf("Audit left %d objects under cairn-bench-audit/", n)
	}
	if !strings.Contains(progress.String(), "removed the 40 benchmark objects under cairn-bench-audit/40/") {
		t.Errorf("Audit did not say it removed its objects: %q", progress.String())
	}
}

// Cancelled while writing, Audit still removes what it wrote.
func TestAuditCancelledRemovesItsObjects(t *testing.T) {
	t.Parallel()
	s, dir := fsStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var progress bytes.Buffer
	go func() {
		_, err := bench.Audit(ctx, bench.AuditOptions{Store: s, StoreURL: dir, Objects: 100000, Progress: &progress})
		done <- err
	}()
	for countUnder(t, s, "cairn-bench-audit/") == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("cancelled Audit returned %v", err)
	}
	if n := countUnder(t, s, "cairn-bench-audit/"); n != 0 {
		t.Errorf("cancelled Audit left %d objects", n)
	}
	if !strings.Contains(progress.String(), "benchmark objects under cairn-bench-audit/100000/") {
		t.Errorf("cancelled Audit did not say it removed its objects: %q", progress.String())
	}
}

func TestObjstore(t *testing.T) {
	t.Parallel()
	s, _ := fsStore(t)
	rs, err := bench.Objstore(t.Context(), s, bench.ObjstoreOptions{Ops: 20, Size: 16})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 2)
	if n := countUnder(t, s, ""); n != 0 {
		t.Errorf("Objstore left %d objects", n)
	}
}

func TestFs(t *testing.T) {
	t.Parallel()
	s, dir := fsStore(t)
	rs, err := bench.Fs(t.Context(), bench.FsOptions{Store: s, StoreURL: dir, Objects: 30, Concurrency: 4, MemoryObjects: []int{10, 20},
		Rounds: 2, CeilingConcurrencies: []int{1, 4}, CeilingObjects: 10})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 3)
	if c := rs[1]; c.Unit != "copies/s" || c.BaselineP99 <= 0 || c.CairnP99 <= 0 || !strings.Contains(c.Note, "requests per object") {
		t.Errorf("the copy-rate result: %+v", c)
	}
	if n := countUnder(t, s, "cairn-bench-fs/"); n != 0 {
		t.Errorf("Fs left %d objects", n)
	}
}

// On MinIO, through its counted requests: one request per object copied,
// and the sources deleted in batches.
func TestFsMinIO(t *testing.T) {
	t.Parallel()
	b, url := testenv.NewBucket(t, testenv.S3(t))
	s := objstore.New(b, nil)
	rs, err := bench.Fs(t.Context(), bench.FsOptions{Store: s, StoreURL: url, Objects: 150, Rounds: 1, CeilingConcurrencies: []int{4}, CeilingObjects: 20})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 2)
	if note := rs[1].Note; !strings.Contains(note, "(copy 1, ") || !strings.Contains(note, "delete_batch") {
		t.Errorf("requests per object: %s", note)
	}
	if n := countUnder(t, s, "cairn-bench-fs/"); n != 0 {
		t.Errorf("Fs left %d objects", n)
	}
}

func TestDocs(t *testing.T) {
	t.Parallel()
	s := memStore(t)
	rs, err := bench.Docs(t.Context(), bench.DocsOptions{Store: s, Writers: []int{1, 4}, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 2)
	if rs[1].Name != "docs/4-writers" {
		t.Errorf("names: %q, %q", rs[0].Name, rs[1].Name)
	}
}

// The multi-process phase runs WorkerCommand, which hands its flags to
// DocsWorker: here the test binary itself.
func TestDocsProcesses(t *testing.T) {
	t.Parallel()
	s, dir := fsStore(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := bench.Docs(t.Context(), bench.DocsOptions{Store: s, StoreURL: dir, Writers: []int{1}, Duration: 300 * time.Millisecond,
		Processes: []bench.ProcessShape{{Procs: 2, Writers: 2}, {Procs: 3, Writers: 1}}, WorkerCommand: []string{"/usr/bin/env", "CAIRN_BENCH_DOCS_WORKER=1", self, "docs-worker"}})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 3)
	if rs[1].Name != "docs/2-processes-x-2-writers" || rs[2].Name != "docs/3-processes-x-1-writers" {
		t.Errorf("names %q, %q", rs[1].Name, rs[2].Name)
	}
	for _, r := range rs[1:] {
		if r.CairnP99 <= 0 || r.BaselineP99 <= 0 {
			t.Errorf("%s: p99s %v and %v: the workers' latencies did not reach the parent", r.Name, r.BaselineP99, r.CairnP99)
		}
		if !strings.Contains(r.Note, "the store alone") {
			t.Errorf("%s: the note does not give the store's own ceiling: %s", r.Name, r.Note)
		}
	}
}

// docsWorkerMain is `cairn bench docs-worker` without cobra.
func docsWorkerMain(args []string) int {
	var storeURL string
	var startNs int64
	opts := bench.DocsWorkerOptions{}
	for i := 1; i+1 < len(args); i += 2 {
		v := args[i+1]
		switch args[i] {
		case "--store":
			storeURL = v
		case "--mode":
			opts.Mode = v
		case "--key":
			opts.Key = v
		case "--writers":
			fmt.Sscan(v, &opts.Writers)
		case "--duration":
			opts.Duration, _ = time.ParseDuration(v)
		case "--start":
			fmt.Sscan(v, &startNs)
		}
	}
	opts.Start = time.Unix(0, startNs)
	s, err := objstore.Open(context.Background(), storeURL, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	_ = json.NewEncoder(os.Stdout).Encode(bench.DocsWorker(context.Background(), s, opts))
	return 0
}

func TestLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rs, err := bench.Ledger(t.Context(), bench.LedgerOptions{
		URLs:   []string{filepath.Join(dir, "bench.db"), "file://" + filepath.Join(dir, "objledger")},
		Events: 1000, Keys: 100, NaiveEvents: 200, Batch: 100, Workers: 2, Claims: 200,
	})
	if err != nil {
		t.Fatal(err)
	}
	// sqlite: decisions, claims; object store: decisions, requests, claims.
	checkResults(t, rs, 5)
	if !strings.Contains(rs[0].Name, "[sqlite]") || !strings.Contains(rs[3].Name, "[object store]") {
		t.Errorf("names %q, %q", rs[0].Name, rs[3].Name)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	rs, err := bench.Serve(t.Context(), bench.ServeOptions{Events: 200, ExecEvents: 20, Senders: 4, Concurrency: 4, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rs, 2)
	// Two rounds on one ledger, each side's rates given.
	if !strings.Contains(rs[0].Name, "median of 2 rounds") || !regexp.MustCompile(`baseline \d+/\d+, cairn \d+/\d+$`).MatchString(rs[0].Note) {
		t.Errorf("%s: %s", rs[0].Name, rs[0].Note)
	}
	// The no-op run measures the pipeline's ceiling too (its 200 events were
	// all handled, else Serve failed), in both rounds; the exec run does not.
	if rs[0].PipelineCeiling <= 0 || rs[0].PipelineCeilingP99 <= 0 || !regexp.MustCompile(`by round \d+/\d+$`).MatchString(rs[0].PipelineCeilingDesc) || rs[1].PipelineCeiling != 0 {
		t.Errorf("ceilings %v (%q), %v", rs[0].PipelineCeiling, rs[0].PipelineCeilingDesc, rs[1].PipelineCeiling)
	}
	var table bytes.Buffer
	if err := bench.Print(&table, false, rs); err != nil || !strings.Contains(table.String(), "ratio pipeline ceiling/baseline: ") {
		t.Errorf("table (%v): %s", err, table.String())
	}
}

// Print: the --json lines carry name, unit, baseline, cairn and ratio; the
// table says which way is better.
func TestPrint(t *testing.T) {
	t.Parallel()
	r := bench.NewResult("x", "ops/s", 2, 3)
	r.Lower = true
	var js, table bytes.Buffer
	if err := bench.Print(&js, true, []bench.Result{r}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "unit", "baseline", "cairn", "ratio"} {
		if _, ok := got[k]; !ok {
			t.Errorf("--json line lacks %q: %s", k, js.String())
		}
	}
	if err := bench.Print(&table, false, []bench.Result{r}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "ratio cairn/baseline: 1.50 (lower is better)") {
		t.Errorf("table: %s", table.String())
	}
}
