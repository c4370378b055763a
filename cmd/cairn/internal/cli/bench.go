package cli

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/sandbox"
	"github.com/cairn-s3/cairn/internal/safetext"
)

// The bench commands parse flags and call package bench, which holds the
// workloads, the baselines and the report.

func benchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench NAME",
		Short: "Measure cairn against a naive baseline in the same run and print the ratio",
		Long: `bench runs a whole-system benchmark. Each measures a naive baseline and cairn
in the same run, interleaved, and prints both figures and their ratio (with
--json, one JSON object per line; the last line has name, unit, baseline, cairn
and ratio). Absolute figures on shared machines are noise; ratios are not.`,
	}
	cmd.AddCommand(benchObjstoreCmd(e), benchDocsCmd(e), benchDocsWorkerCmd(e), benchLedgerCmd(e), benchServeCmd(e), benchFsCmd(e), benchAuditCmd(e), benchLambdaCmd(e), benchRSSCmd(e))
	return cmd
}

func benchObjstoreCmd(e *env) *cobra.Command {
	var storeURL string
	var opts bench.ObjstoreOptions
	cmd := &cobra.Command{
		Use:   "objstore",
		Short: "Cost of conditional writes (if-absent, if-match) against plain writes on one store",
		Long: `Measures, alternating in rounds on the same store, plain PUTs (the baseline)
against write-once PUTs (If-None-Match: *) of fresh keys and compare-and-swap
PUTs (If-Match) of one key. A ratio near 1 means conditions are nearly free;
the fs store's target is >= 0.5 (conditional within 2x of plain).`,
		Example: `  cairn bench objstore --store ./cairn-data/bench
  cairn bench objstore --store 's3://bucket/bench?endpoint=http://127.0.0.1:9000&path_style=true' --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Ops < 10 {
				return usagef("--ops must be at least 10")
			}
			s, err := openStore(cmd.Context(), storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			return e.printResults(bench.Objstore(cmd.Context(), s, opts))
		},
	}
	nonEmptyVar(cmd.Flags(), &storeURL, "store", "./cairn-data/bench", "store URL to benchmark (scratch keys go under cairn-bench/)", "name the store, or drop --store for ./cairn-data/bench")
	cmd.Flags().IntVar(&opts.Ops, "ops", 400, "operations per variant")
	cmd.Flags().IntVar(&opts.Size, "size", 4096, "object size in bytes")
	return cmd
}

func benchDocsCmd(e *env) *cobra.Command {
	var storeURL, writersList, procsList string
	var procWriters int
	var opts bench.DocsOptions
	cmd := &cobra.Command{
		Use:   "docs",
		Short: "Committed updates/s on one document: the naive CAS loop vs cairn's group commit",
		Long: `For each writer count, W goroutines increment one counter document for
--duration with the textbook loop (GET, modify, PUT If-Match, retry on 412) and
then with cairn (docstore.Update with group commit), each on a fresh key. Reports
committed updates per second, p99 update latency and the ratio. Then, for each
shape in --procs, runs that many OS processes on one document, both ways: "4x16"
is 4 processes of 16 writers, a bare "4" is 4 processes of --proc-writers each;
the default rows are 4x16 and 64x1 (the shape Lambda invocations give); "0"
skips them. Every phase checks that the counter equals the number of updates
reported committed. A process row's p99 is over every update of every process,
and its note gives what the store alone does for as many writers at once
(unconditional PUTs of one key, with their p99, and creates of new keys): the
ceiling any design that keeps the document in that store meets.`,
		Example: `  cairn bench docs --store 's3://bench?endpoint=http://127.0.0.1:9000&path_style=true' --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range strings.Split(writersList, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return usagef("--writers %q: a comma-separated list of positive numbers", writersList)
				}
				opts.Writers = append(opts.Writers, n)
			}
			shapes, err := parseProcShapes(procsList, procWriters)
			if err != nil {
				return err
			}
			opts.Processes = shapes
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			opts.Store, opts.StoreURL, opts.Log = s, storeURL, e.log
			return e.printResults(bench.Docs(ctx, opts))
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "./cairn-data/bench", "store URL")
	cmd.Flags().StringVar(&writersList, "writers", "1,4,16,64", "writer counts to measure")
	durflag.Var(cmd.Flags(), &opts.Duration, "duration", 3*time.Second, "how long each phase runs")
	cmd.Flags().StringVar(&procsList, "procs", "4x16,64x1", `multi-process rows: PROCSxWRITERS, or PROCS (of --proc-writers each), comma-separated; "0" skips them`)
	cmd.Flags().IntVar(&procWriters, "proc-writers", 16, "writers in each process of a --procs row that names none")
	return cmd
}

// parseProcShapes reads --procs: comma-separated PxW or P (P processes of
// writers each); "0" alone is none.
func parseProcShapes(list string, writers int) ([]bench.ProcessShape, error) {
	if strings.TrimSpace(list) == "0" {
		return nil, nil
	}
	bad := usagef("--procs %q: comma-separated rows of PROCSxWRITERS (4x16) or PROCS (4, of --proc-writers each), or 0 for none", list)
	if writers < 1 {
		return nil, usagef("--proc-writers %d: must be at least 1", writers)
	}
	var shapes []bench.ProcessShape
	for _, f := range strings.Split(list, ",") {
		p, w, found := strings.Cut(strings.TrimSpace(f), "x")
		sh := bench.ProcessShape{Writers: writers}
		var err error
		if sh.Procs, err = strconv.Atoi(p); err != nil || sh.Procs < 1 {
			return nil, bad
		}
		if found {
			if sh.Writers, err = strconv.Atoi(w); err != nil || sh.Writers < 1 {
				return nil, bad
			}
		}
		shapes = append(shapes, sh)
	}
	return shapes, nil
}

// benchDocsWorkerCmd is one worker process of bench docs (bench.DocsOptions.WorkerCommand).
func benchDocsWorkerCmd(e *env) *cobra.Command {
	var storeURL string
	var opts bench.DocsWorkerOptions
	var startNs int64
	cmd := &cobra.Command{
		Use:    "docs-worker",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			opts.Start = time.Unix(0, startNs)
			return e.writeJSON(bench.DocsWorker(ctx, s, opts))
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "")
	cmd.Flags().StringVar(&opts.Mode, "mode", "cairn", "")
	cmd.Flags().StringVar(&opts.Key, "key", "", "")
	cmd.Flags().IntVar(&opts.Writers, "writers", 16, "")
	durflag.Var(cmd.Flags(), &opts.Duration, "duration", 3*time.Second, "")
	cmd.Flags().Int64Var(&startNs, "start", 0, "")
	return cmd
}

func benchLedgerCmd(e *env) *cobra.Command {
	var opts bench.LedgerOptions
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Ledger decisions/s: batched cairn against a naive per-event ledger, for each --ledger given",
		Long: `Generates --events events over --keys keys (overwrites with increasing
sequencers, 1% duplicates, 5% reordered) and records them into the ledger in
batches of --batch from --workers goroutines: decisions per second. Then claims
and completes up to --claims records: claims+completions/s.

The baseline runs on the same kind of storage, on the first --naive-events
events of the same workload: on SQLite and PostgreSQL, seed 001's table done
per event (SELECT, then INSERT or UPDATE, one transaction each); on an object
store, one marker object per key (GET it, PUT it if the event is newer: no
conditions, no batching; at most 2,000 events); on DynamoDB (dynamodb://TABLE),
AWS Lambda Powertools' idempotency pattern from --workers goroutines (per event
a conditional put of an INPROGRESS item, then an update to COMPLETED), while
cairn records, then claims and completes until no work is left. For object
stores the bench also counts requests per 1,000 events, and for DynamoDB write
requests per 1,000 events (the table and TABLE-naive are deleted before and
after: scratch names).

--ledger may be given several times: each ledger runs the same workload in turn,
so SQLite, PostgreSQL and the object-store ledger are compared in one run. Every
ledger is wiped before its run (table cairn_ledger, or every object under the
object-store ledger's prefix): point them at scratch locations.`,
		Example: `  cairn bench ledger --ledger /tmp/bench.db
  cairn bench ledger --ledger 'postgres://postgres@127.0.0.1:5432/bench' --workers 8 --json
  cairn bench ledger --ledger /tmp/bench.db --ledger 's3://scratch/ledger?endpoint=http://127.0.0.1:9000&path_style=true' --workers 4
  cairn bench ledger --ledger 'dynamodb://scratch-ledger?endpoint=http://127.0.0.1:4567' --events 20000 --keys 5000 --workers 8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Events < 1000 || opts.Keys < 1 || opts.Batch < 1 || opts.Workers < 1 {
				return usagef("--events >= 1000, --keys, --batch and --workers >= 1")
			}
			return e.printResults(bench.Ledger(cmd.Context(), opts))
		},
	}
	nonEmptyArrayVar(cmd.Flags(), &opts.URLs, "ledger", "ledger URL, repeatable (scratch: it is wiped; default ./cairn-data/bench-ledger.db)", "name the ledger, or drop --ledger for the default")
	cmd.Flags().IntVar(&opts.Events, "events", 1_000_000, "events to record")
	cmd.Flags().IntVar(&opts.Keys, "keys", 100_000, "distinct keys")
	cmd.Flags().IntVar(&opts.NaiveEvents, "naive-events", 10_000, "events for the naive baseline")
	cmd.Flags().IntVar(&opts.Batch, "batch", 1000, "events per Record call")
	cmd.Flags().IntVar(&opts.Workers, "workers", 1, "concurrent recorders and claimers")
	cmd.Flags().IntVar(&opts.Claims, "claims", 20_000, "records to claim and complete")
	return cmd
}

func benchServeCmd(e *env) *cobra.Command {
	var opts bench.ServeOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Intake throughput through the webhook: cairn (ledger) against the same server with the ledger bypassed",
		Long: `Posts MinIO-style webhook bodies (one record per POST, distinct keys) from
--senders concurrent senders to a real HTTP server on 127.0.0.1, and measures
sustained events/s from the first POST to the last handler call, and the p99
delivery-to-handler latency (POST sent → handler called).

cairn: the webhook records each event in the ledger (group commit) before
answering, workers claim, run the handler, and complete (batched). Baseline: the
same server and handler with the ledger bypassed (the handler runs inside the
request). Run with a Go no-op handler (--events) and with an exec handler that
runs /bin/true (--exec-events). Each side runs --rounds times, alternating:
events/s is the median round's, the latencies are over every round's events.
With the no-op handler a third side runs in each round, the pipeline ceiling:
the same pipeline on an in-memory ledger that keeps nothing (a measuring
instrument, not a ledger), printed with "ratio pipeline ceiling/baseline"
(the pipeline's share of the gap) and "cairn/pipeline ceiling" (the
ledger's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Events < 100 || opts.Senders < 1 || opts.Concurrency < 1 || opts.Rounds < 1 {
				return usagef("--events >= 100, --senders, --concurrency and --rounds >= 1")
			}
			return e.printResults(bench.Serve(cmd.Context(), opts))
		},
	}
	cmd.Flags().IntVar(&opts.Events, "events", 50000, "events for the no-op handler run")
	cmd.Flags().IntVar(&opts.ExecEvents, "exec-events", 3000, "events for the exec handler run (0 skips it)")
	cmd.Flags().IntVar(&opts.Senders, "senders", 64, "concurrent webhook senders")
	cmd.Flags().IntVar(&opts.Concurrency, "concurrency", 64, "handlers at once")
	nonEmptyVar(cmd.Flags(), &opts.LedgerURL, "ledger", "", "ledger URL (default: a fresh SQLite file); wiped by nothing: refused if it holds work to do", "drop --ledger for a fresh SQLite file")
	cmd.Flags().StringVar(&opts.Only, "only", "", "run only the noop or the exec handler")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 3, "rounds of each side, alternating (events/s is the median round's)")
	cmd.Flags().BoolVar(&opts.SkipBaseline, "skip-baseline", false, "profiling: run cairn only")
	_ = cmd.Flags().MarkHidden("skip-baseline")
	return cmd
}

func benchRSSCmd(e *env) *cobra.Command {
	var opts bench.RSSOptions
	cmd := &cobra.Command{
		Use:   "rss",
		Short: "cairn serve's resident memory against the size of its SQLite ledger, against the same serve on an empty ledger",
		Long: `For each of --records it fills a SQLite ledger of that many records through the
ledger's API (95% processed, 5% dead letters of a few error classes, the last
1% pending), starts this binary as 'cairn serve' on it with an HTTP handler that
answers at once, and for --duration posts --rate webhook events a second (new
keys and newer versions of recorded ones) and reads the status page and its API
--views times a second (the API, the first page, the next page of dead letters,
one error class, a key prefix), sampling /proc/PID/status (Linux). Steady RSS
is the median VmRSS over the second half of the load, with its anonymous and
file-backed shares and the Go heap in use at the end; peak is VmHWM. The
baseline is the same serve and load on an empty ledger.

Filling 2,000,000 records takes a few minutes and about 1 GB of disk in
--dir (default: a temporary directory); each ledger is deleted after its run,
unless --keep keeps it there for the next run.`,
		Example: `  cairn bench rss
  cairn bench rss --records 20000,200000 --duration 10s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Duration <= 0 || opts.Rate < 1 || opts.Views < 1 || len(opts.Sizes) == 0 {
				return usagef("--records, --duration, --rate and --views must be positive")
			}
			if opts.Keep && opts.Dir == "" {
				return usagef("--keep keeps the filled ledgers in --dir: name the directory")
			}
			for _, n := range opts.Sizes {
				if n < 1 {
					return usagef("--records %d: each size must be at least 1 (the empty ledger is the baseline, always run)", n)
				}
			}
			var err error
			if opts.Cairn, err = os.Executable(); err != nil {
				return fmt.Errorf("finding this cairn binary, run as cairn serve: %w", err)
			}
			opts.Progress = func(phase string) { fmt.Fprintln(e.stderr, phase) }
			return e.printResults(bench.RSS(cmd.Context(), opts))
		},
	}
	cmd.Flags().IntSliceVar(&opts.Sizes, "records", []int{20000, 200000, 2000000}, "ledger sizes to measure, in records")
	durflag.Var(cmd.Flags(), &opts.Duration, "duration", 20*time.Second, "how long each serve runs under load")
	cmd.Flags().IntVar(&opts.Rate, "rate", 50, "webhook events a second")
	cmd.Flags().IntVar(&opts.Views, "views", 4, "status page and API requests a second")
	nonEmptyVar(cmd.Flags(), &opts.Dir, "dir", "", "directory the ledgers are made in (default: a temporary one)", "drop --dir for a temporary directory")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "keep the filled ledgers in --dir (ledger-N.db) and reuse those found there; serve runs on a copy")
	return cmd
}

func benchFsCmd(e *env) *cobra.Command {
	var storeURL string
	var opts bench.FsOptions
	cmd := &cobra.Command{
		Use:   "fs --store URL",
		Short: "Folder rename: cairn (parallel, journaled, locked) against the naive list/copy/delete loop",
		Long: `Writes --objects small objects under two folders of the store, renames one with
the naive sequential loop (list, copy one, delete one) and the other with cairn
(tree lock, intent journal, --concurrency copies and deletes in flight), and
prints objects/s for both, the ratio, and the share of cairn's time spent on
its journal.

It also measures the store's ceiling: in --rounds rounds, bare CopyObject
requests (no journal, no lock) of --ceiling-objects of the same objects at each
of --ceiling-concurrency in flight, then every object of the round's folder at
the fastest of them (the ceiling), then a rename by cairn of that folder. It
prints cairn's copy rate (over its copy phase) against the ceiling, both the
median of the rounds, with the p50 and p99 of one
copy on each side, the whole rename's rate against the same ceiling, and
cairn's requests per object.

With --memory-objects N,… it then renames folders of N objects (on the store
given; use a local directory) and reports the peak Go heap during each rename:
the manifest is streamed in chunks, so memory stays flat as N grows.

Everything the bench writes is under cairn-bench-fs/ and is deleted after.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeURL == "" || opts.Objects < 1 || opts.Concurrency < 0 {
				return usagef("--store and --objects >= 1 are required; --concurrency may not be negative")
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			opts.Store, opts.StoreURL, opts.Progress = s, storeURL, e.stderr
			return e.printResults(bench.Fs(ctx, opts))
		},
	}
	nonEmptyVar(cmd.Flags(), &storeURL, "store", "", "store URL (s3://… or a directory)", "name the store")
	cmd.Flags().IntVar(&opts.Objects, "objects", 10000, "objects in the renamed folders")
	cmd.Flags().IntVar(&opts.Concurrency, "concurrency", 0, "cairn's copies and deletes in flight (default: the folder package's)")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 3, "rounds of ceiling measurement and cairn rename")
	cmd.Flags().IntSliceVar(&opts.CeilingConcurrencies, "ceiling-concurrency", []int{8, 16, 32, 64, 128}, "bare CopyObject requests in flight at which the ceiling is measured")
	cmd.Flags().IntVar(&opts.CeilingObjects, "ceiling-objects", 1000, "objects copied by each ceiling measurement")
	cmd.Flags().IntSliceVar(&opts.MemoryObjects, "memory-objects", nil, "also rename folders of these sizes and report peak heap (e.g. 20000,200000)")
	return cmd
}

func benchAuditCmd(e *env) *cobra.Command {
	var storeURL string
	var opts bench.AuditOptions
	cmd := &cobra.Command{
		Use:   "audit --store URL [--objects N]",
		Short: "Audit time against a bare LIST of the same prefix, with a ledger holding every object",
		Long: `Writes --objects small objects under cairn-bench-audit/N/ (reused if an earlier
run that was killed left exactly that many there), records them in a fresh
SQLite ledger as processed, then times a bare LIST of the prefix and a dry-run
audit of it, and reports the ratio and the audit's peak Go heap.

When it ends, on success, error or interrupt (Ctrl-C) alike, it deletes every
object under cairn-bench-audit/N/ and says so on stderr (or what it could not
delete, and how to delete it). Only a killed process leaves them behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeURL == "" || opts.Objects < 1 {
				return usagef("--store and --objects >= 1 are required")
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			opts.Store, opts.StoreURL, opts.Progress = s, storeURL, e.stderr
			return e.printResults(bench.Audit(ctx, opts))
		},
	}
	nonEmptyVar(cmd.Flags(), &storeURL, "store", "", "store URL", "name the store")
	cmd.Flags().IntVar(&opts.Objects, "objects", 100000, "objects to audit")
	return cmd
}

// printResults prints a benchmark's results as a table (or JSON), or returns
// the error that ended it.
func (e *env) printResults(results []bench.Result, err error) error {
	if err != nil {
		return err
	}
	return bench.Print(e.stdout, e.json, results)
}

func benchLambdaCmd(e *env) *cobra.Command {
	var opts bench.LambdaOptions
	var storeURL, postgresURL, dynamoURL string
	var phases bool
	cmd := &cobra.Command{
		Use:   "lambda",
		Short: "cairn lambda through the Lambda Runtime Interface Emulator, per ledger, against the same function with the ledger bypassed",
		Long: `Runs cairn lambda (this binary) in --sandboxes sandboxes of AWS's Lambda
Runtime Interface Emulator on loopback, invoked back to back with SQS batches
of --batch fresh keys and a no-op HTTP handler, on each ledger: the
object-store ledger in --store (an s3:// bucket, e.g. a local MinIO; without
--store, a directory store on this machine), PostgreSQL with --postgres, the
DynamoDB ledger with --dynamodb. The baseline is the same function with the
ledger bypassed (the handler called once per event, in the same sandboxes'
setup), run in alternating rounds. It prints invocations/s, the invocation
latency p50 and p99 and the latency cairn adds per batch, and, for ledgers
reached over HTTP (S3, DynamoDB: through a counting proxy on loopback), the
ledger requests per 1,000 events against a Powertools-style idempotency guard
on the same store (a conditional put INPROGRESS and a conditional put
COMPLETED per event; on DynamoDB that design's two requests per event).

The emulator is built by 'go run ./internal/testing/cmd/services install' in
cairn's source tree (or give --rie PATH).`,
		Example: `  cairn bench lambda
  cairn bench lambda --store 's3://bench/lambda?endpoint=http://127.0.0.1:9000&path_style=true'
  cairn bench lambda --store 's3://bench/lambda?endpoint=http://127.0.0.1:9000&path_style=true' --postgres postgres://postgres@127.0.0.1:5432/bench --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if opts.Sandboxes < 1 || opts.Invocations < 1 || opts.BatchSize < 1 || opts.BatchSize > 10000 || opts.Rounds < 1 {
				return usagef("--sandboxes, --invocations, --batch (at most 10000) and --rounds must be positive")
			}
			rie, err := sandbox.FindRIE(opts.RIE)
			if err != nil {
				return exitError{code: ExitPrecondition, err: err}
			}
			opts.RIE = rie
			if opts.Bootstrap, err = os.Executable(); err != nil {
				return fmt.Errorf("finding this cairn binary, the sandboxes' bootstrap: %w", err)
			}
			dir, err := os.MkdirTemp("", "cairn-bench-lambda-")
			if err != nil {
				return err
			}
			opts.Dir = dir
			// Removed on every way out (a usage error, --phases, Ctrl-C or
			// SIGTERM, success) but a failed run, whose sandboxes' logs it
			// keeps and names.
			keep := false
			defer func() {
				if !keep {
					os.RemoveAll(dir)
				}
			}()
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			if storeURL == "" {
				p := filepath.Join(dir, "ledger")
				if err := os.MkdirAll(p, 0o755); err != nil {
					return err
				}
				opts.Ledgers = append(opts.Ledgers, bench.LambdaLedger{Name: "objledger-local-dir", URL: (&url.URL{Scheme: "file", Path: filepath.ToSlash(p), RawQuery: "nosync=true"}).String(), Local: true})
			} else {
				u, err := url.Parse(storeURL)
				if err != nil || u.Scheme != "s3" {
					return usagef("--store %s: give an s3:// bucket URL (the ledger goes under its prefix, in cairn-bench-lambda/RUN/)", safetext.URL(storeURL))
				}
				u.Path = strings.TrimSuffix(u.Path, "/") + "/cairn-bench-lambda/" + run
				opts.Ledgers = append(opts.Ledgers, bench.LambdaLedger{Name: "objledger-s3", URL: u.String()})
			}
			if postgresURL != "" {
				opts.Ledgers = append(opts.Ledgers, bench.LambdaLedger{Name: "postgres", URL: postgresURL})
			}
			if dynamoURL != "" {
				opts.Ledgers = append(opts.Ledgers, bench.LambdaLedger{Name: "dynamodb", URL: dynamoURL})
			}
			if phases {
				for _, l := range opts.Ledgers {
					if err := bench.LambdaPhases(ctx, e.stdout, l.URL, opts.Sandboxes, opts.Invocations, opts.BatchSize); err != nil {
						return fmt.Errorf("bench lambda --phases on %s: %w", l.Name, err)
					}
				}
				return nil
			}
			if isTerminal(e.stderr) {
				opts.Progress = func(phase string) { fmt.Fprintf(e.stderr, "\r\033[K%s", phase) }
				defer fmt.Fprint(e.stderr, "\r\033[K")
			}
			results, err := bench.Lambda(ctx, opts)
			if err != nil && ctx.Err() == nil {
				keep = true
				return fmt.Errorf("%w (the sandboxes' directories are kept in %s)", err, dir)
			}
			if err != nil {
				return err
			}
			return e.printResults(results, nil)
		},
	}
	fs := cmd.Flags()
	nonEmptyVar(fs, &opts.RIE, "rie", "", "the aws-lambda-rie binary (default: the one 'go run ./internal/testing/cmd/services install' builds)", "name the emulator binary, or drop --rie")
	nonEmptyVar(fs, &storeURL, "store", "", "s3:// bucket for the object-store ledger (under cairn-bench-lambda/RUN/; default: a directory store on this machine)", "name the bucket, or drop --store")
	nonEmptyVar(fs, &postgresURL, "postgres", "", "also measure a PostgreSQL ledger at this URL", "name the database, or drop --postgres")
	nonEmptyVar(fs, &dynamoURL, "dynamodb", "", "also measure a DynamoDB ledger at this URL (dynamodb://TABLE?endpoint=http://…&create_table=true)", "name the table, or drop --dynamodb")
	fs.IntVar(&opts.Sandboxes, "sandboxes", 4, "sandboxes invoked at once")
	fs.IntVar(&opts.Invocations, "invocations", 50, "invocations per sandbox per round and side")
	fs.IntVar(&opts.BatchSize, "batch", 10, "events per SQS batch")
	fs.IntVar(&opts.Rounds, "rounds", 3, "rounds per side, alternating")
	fs.BoolVar(&phases, "phases", false, "profile instead: in this process, on each ledger, --sandboxes ledgers opened apart each invoked --invocations times, timed (and requests counted, S3 and DynamoDB) per ledger call and handlers (p50, p99 per invocation)")
	return cmd
}
