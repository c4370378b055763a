package cli

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/demo"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/sandbox"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

func demoCmd(e *env) *cobra.Command {
	var o demo.Options
	var storeURL, ledgerURL, dir string
	var lambda bool
	var lo demo.Lambda
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole intake pipeline with real-world notification faults, next to a naive consumer",
		Long: `cairn demo writes objects (with overwrites and deletes of the same keys, and
awkward key names) to a bucket, and delivers their S3-format notifications with
the faults real S3 notifications have, scaled up so they are visible:
duplicates (up to 3 copies, some concurrent, some late), overwrites of a key
delivered out of order, and lost events.

A naive consumer runs its handler once per delivery. cairn receives the same
deliveries over HTTP at its webhook (as 'cairn serve' does), decides through the
ledger, and runs the same handler per claim. Both materialise each object into a
serving table (SQLite); the report compares them with the bucket.

By default everything is embedded and temporary: a local-directory bucket, a
SQLite ledger and the serving tables in a fresh directory that is deleted when
the demo ends (the report says so); --dir DIR keeps them all in DIR. Being
throwaway, that bucket is written without fsync and that ledger runs with
synchronous=normal (no fsync per commit; what a power loss could cost, which is
no fault the demo shows): how long cairn takes then depends on the CPU, not on
how busy the disk is. 'cairn serve' keeps synchronous=full. --store and
--ledger run the same against real services, e.g.
  cairn demo --store 's3://bucket/demo/?endpoint=http://127.0.0.1:9000' --ledger postgres://…

After the deliveries, cairn audits the bucket (a LIST against the ledger, as
'cairn audit' does) and processes what the lost events never announced.

cairn's handler also writes each key's effect into a sink (objects under
DIR/effects) through the fence, with its claim's fencing token. With --crash,
the daemon is killed once while a handler is stuck before its writes (its
ledger connection dies, as with kill -9: its claims expire), and a new one
takes the work over; the stuck handler writes after its successor, with its
old token, as a paused, partitioned or orphaned worker would. The report reads the sink back:
"effects: N written exactly once" counts the keys whose effect is the bucket's
final state, written once; the stale writes the sink refused are counted too.

The naive consumer's "objects missed" are the keys whose newest event was lost
and which it serves wrong; the audit's "changes found" are the objects whose
state in the bucket differs from cairn's ledger. They differ when a lost event
changed nothing (a delete after a delete) or when the naive consumer's
out-of-order deliveries happened to leave a key as the bucket has it; the
report then says how many of each.

With --lambda, cairn runs as an AWS Lambda function instead of a daemon,
under AWS's Lambda Runtime Interface Emulator on loopback: --sandboxes
sandboxes (and one more for the scheduled drain), each running this cairn
binary as its bootstrap ('cairn lambda', configured by environment:
CAIRN_LEDGER, CAIRN_HANDLER_HTTP), on one shared ledger: by default an
object-store ledger in a directory store under --dir (with --ledger, yours:
s3://…, postgres://… or dynamodb://…). The same deliveries, with the same
faults, reach the sandboxes as SQS batches and direct invocations, a
concurrent duplicate going to two sandboxes at once, and what a sandbox
answers failed (batchItemFailures, a timeout) is delivered again, as SQS
does. A scheduled drain runs every second in its own sandbox. Before the
deliveries that sandbox is frozen in the middle of a handler (as a handler
that ignores its deadline holds it) so that Lambda's timeout kills it
mid-run: the key is taken over after its claim's lease with a higher
fencing token, and the killed handler's late writes must be refused. The
emulator is built by 'go run ./internal/testing/cmd/services install' in
cairn's source tree (or give --rie PATH); without --lambda the demo needs
no server at all. Linux only (the sandbox is frozen through /proc).

Exit status 1 if one of cairn's invariants fails (the report names it): every
change processed once, no stale overwrites, every object served as the bucket
has it at the end, every effect written once and the bucket's final state.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			kept := dir != ""
			if dir == "" {
				tmp, err := os.MkdirTemp("", "cairn-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			// The store's file:// URL is built from it: relative, it
			// would be read as a host ("file://rel/bucket").
			abs, err := filepath.Abs(dir)
			if err != nil {
				return usagef("--dir: %v", err)
			}
			dir = abs
			if storeURL == "" {
				bucket := filepath.Join(dir, "bucket")
				if err := os.MkdirAll(bucket, 0o755); err != nil {
					return err
				}
				storeURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(bucket), RawQuery: "nosync=true"}).String()
				o.Bucket = "demo"
			} else if u, err := objstore.ParseURL(storeURL); err == nil && u.Scheme == "s3" {
				o.Bucket = u.Host
			}
			if lambda {
				rie, err := sandbox.FindRIE(lo.RIE)
				if err != nil {
					return exitError{code: ExitPrecondition, err: err}
				}
				lo.RIE = rie
				if lo.Bootstrap, err = os.Executable(); err != nil {
					return fmt.Errorf("finding this cairn binary, the sandboxes' bootstrap: %w", err)
				}
				if ledgerURL == "" {
					ledgerDir := filepath.Join(dir, "ledger")
					if err := os.MkdirAll(ledgerDir, 0o755); err != nil {
						return err
					}
					ledgerURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(ledgerDir), RawQuery: "nosync=true"}).String()
				} else if scheme, _, _ := strings.Cut(ledgerURL, "://"); scheme == "sqlite" || !strings.Contains(ledgerURL, "://") {
					return usagef("--lambda with --ledger %s: the sandboxes share the ledger, and a SQLite file cannot be shared by Lambda sandboxes; give s3://…, postgres://… or dynamodb://…, or drop --ledger for an object-store ledger under --dir", safetext.URL(ledgerURL))
				}
				if lo.Sandboxes <= 0 {
					return usagef("--sandboxes must be positive")
				}
				lo.LedgerURL = ledgerURL
				o.Lambda = &lo
			}
			if ledgerURL == "" {
				ledgerURL = (&url.URL{Scheme: "sqlite", Path: filepath.Join(dir, "ledger.db"), RawQuery: "synchronous=normal"}).String()
			}
			store, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			led, err := ledger.Open(ctx, ledgerURL, nil)
			if err != nil {
				return err
			}
			defer led.Close()
			if c, err := led.Counts(ctx); err == nil && len(c) > 0 && sum(c) > 0 {
				return usagef("--ledger %s already holds %d records: the demo needs an empty ledger", safetext.URL(ledgerURL), sum(c))
			}
			o.Store, o.Ledger, o.Dir, o.Logger = store, led, dir, e.log
			tty := isTerminal(e.stderr)
			var mu sync.Mutex
			last := time.Time{}
			if tty {
				o.Progress = func(phase string, done, total int) {
					mu.Lock()
					defer mu.Unlock()
					if time.Since(last) < 100*time.Millisecond && done != total {
						return
					}
					last = time.Now()
					fmt.Fprintf(e.stderr, "\r\033[K%-20s %6d / %d", phase, done, total)
				}
			}
			rep, err := demo.Run(ctx, o)
			if tty {
				fmt.Fprint(e.stderr, "\r\033[K")
			}
			if err != nil {
				if ctx.Err() != nil {
					return err // interrupted: main says so
				}
				// %v, not %w: a store's refusal of a write (an invalid key,
				// say, where the fs store holds an object named like a
				// folder) is no usage error of the demo's, so no exit 2 and
				// "see cairn help". Its detail goes to the debug log here.
				if d := objstore.Detail(err); d != "" && e.log != nil {
					e.log.Debug("the error in full", "detail", d)
				}
				return fmt.Errorf("%v: nothing was judged; check that the store %s and the ledger %s are reachable and writable, and %s too (without --store and --ledger the demo uses a temporary directory)",
					err, safetext.URL(storeURL), safetext.URL(ledgerURL), safetext.Escape(dir))
			}
			if e.json {
				if err := e.writeJSON(rep); err != nil {
					return err
				}
			} else {
				printDemo(e, rep, storeURL, ledgerURL)
				if kept {
					fmt.Fprintf(e.stdout, "The bucket, ledger and serving tables are kept in %s.\n", safetext.Escape(dir))
				} else {
					fmt.Fprintf(e.stdout, "The bucket, ledger and serving tables above are temporary: deleted now that the demo ends (--dir DIR keeps them).\n")
				}
			}
			if !rep.InvariantOK {
				return exitError{code: ExitRuntime, err: fmt.Errorf("cairn broke an invariant: %s", brokenInvariants(rep))}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.Writes, "writes", 2000, "object writes (puts and deletes)")
	fs.IntVar(&o.Keys, "keys", 400, "distinct keys written")
	fs.IntVar(&o.Senders, "senders", 16, "concurrent deliveries (and naive handlers)")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "cairn's handlers at once")
	fs.Float64Var(&o.Dup, "dup", 0.06, "share of events delivered more than once")
	fs.Float64Var(&o.Reorder, "reorder", 0.2, "share of a key's overwrites delivered out of order")
	fs.Float64Var(&o.Lost, "lost", 0.01, "share of events never delivered")
	fs.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "random seed for the faults")
	nonEmptyVar(fs, &storeURL, "store", "", "bucket to write (default: a local directory under --dir)", "name the bucket, or drop --store for a local directory")
	nonEmptyVar(fs, &ledgerURL, "ledger", "", "ledger URL (default: SQLite under --dir)", "drop --ledger for SQLite under --dir")
	fs.BoolVar(&o.Crash, "crash", false, "kill cairn's daemon once while a handler is stuck (its claims expire), start another, and let the stuck handler write late")
	fs.BoolVar(&lambda, "lambda", false, "run cairn as an AWS Lambda function under the Lambda Runtime Interface Emulator (sandboxes running this binary as 'cairn lambda') instead of a daemon")
	nonEmptyVar(fs, &lo.RIE, "rie", "", "with --lambda: the aws-lambda-rie binary (default: the one 'go run ./internal/testing/cmd/services install' builds)", "name the emulator binary, or drop --rie")
	fs.IntVar(&lo.Sandboxes, "sandboxes", 4, "with --lambda: sandboxes receiving deliveries (one more runs the scheduled drain)")
	nonEmptyVar(fs, &dir, "dir", "", "keep the demo's bucket, ledger and serving tables here (default: a temporary directory, removed)", "an empty --dir would be a temporary directory, removed at the end; drop the flag to mean that")
	return cmd
}

func sum(c ledger.Counts) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func printDemo(e *env, r demo.Report, storeURL, ledgerURL string) {
	w := e.stdout
	fmt.Fprintf(w, "cairn demo: %d writes (%d deletes) to %d keys in %s; ledger %s\n", r.Writes, r.Deletes, r.Keys, safetext.URL(storeURL), safetext.URL(ledgerURL))
	fmt.Fprintf(w, "deliveries: %d, with %d duplicates (%d concurrent, %d late), %d overwrites out of order, %d events lost\n\n",
		r.Deliveries, r.Duplicates, r.Concurrent, r.Late, r.Reordered, r.Lost)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tnaive consumer\tcairn\t")
	row := func(name string, a, b any) { fmt.Fprintf(tw, "%s\t%v\t%v\t\n", name, a, b) }
	row("handler runs", r.Naive.HandlerRuns, r.Cairn.HandlerRuns)
	row("double-processed", r.Naive.DoubleProcessed, r.Cairn.DoubleProcessed)
	row("stale overwrites", r.Naive.StaleOverwrites, r.Cairn.StaleOverwrites)
	row("objects wrong at the end", r.Naive.Wrong, r.Cairn.Wrong)
	row("objects missed (lost events)", r.Naive.AwaitingAudit, r.Cairn.AwaitingAudit)
	row("changes found by the audit (LIST)", "-", r.Cairn.FoundByAudit)
	row("seconds", fmt.Sprintf("%.2f", r.Naive.Seconds), fmt.Sprintf("%.2f", r.Cairn.Seconds))
	tw.Flush()
	if x := r.Lambda; x != nil {
		fmt.Fprintf(w, "cairn ran as a Lambda function in %d sandboxes (the Runtime Interface Emulator): %d invocations (%d SQS batches, %d direct), %d scheduled drains, %d killed mid-handler by their timeout, %d messages delivered again; their output is in %s\n",
			x.Sandboxes, x.Invocations, x.SQSBatches, x.Direct, x.Drains, x.TimedOut, x.Redelivered, safetext.Escape(x.Logs))
	}
	fmt.Fprintln(w, missedVsFound(r))
	fmt.Fprintln(w, effectsLine(r.Effects))
	fmt.Fprintln(w)
	if r.InvariantOK {
		fmt.Fprintln(w, "cairn: every change processed once, in order per key; nothing stale, nothing double, nothing missed.")
		if r.Cairn.FoundByAudit > 0 {
			fmt.Fprintf(w, "%d changes whose events never arrived were found by the audit (a LIST of the bucket against the ledger) and processed.\n", r.Cairn.FoundByAudit)
		}
	} else {
		fmt.Fprintf(w, "cairn: INVARIANT FAILED: %s\n", brokenInvariants(r))
	}
}

// brokenInvariants names the invariants r broke, with the keys served wrong.
func brokenInvariants(r demo.Report) string {
	s := strings.Join(r.Broken(), "; ")
	if len(r.Cairn.WrongKeys) > 0 {
		s += ": " + strings.Join(escapeAll(r.Cairn.WrongKeys), ", ")
		if r.Cairn.Wrong > len(r.Cairn.WrongKeys) {
			s += ", …"
		}
	}
	return s
}

// effectsLine says what cairn's effects sink holds, read back at the end.
func effectsLine(x demo.Effects) string {
	writes := "writes"
	if x.StaleRefused == 1 {
		writes = "write"
	}
	s := fmt.Sprintf("effects (read back from the sink): %d written exactly once, %d stale %s refused", x.ExactlyOnce, x.StaleRefused, writes)
	if x.Double > 0 {
		s += fmt.Sprintf(", %d written more than once", x.Double)
	}
	if x.Wrong > 0 {
		s += fmt.Sprintf(", %d wrong or missing: %s", x.Wrong, strings.Join(escapeAll(x.WrongKeys), ", "))
		if x.Wrong > len(x.WrongKeys) {
			s += ", …"
		}
	}
	return s + "."
}

// missedVsFound is the line under the table that says what "objects missed"
// and "changes found by the audit" count, and why they differ when they do.
func missedVsFound(r demo.Report) string {
	s := fmt.Sprintf("missed: of the %d keys whose newest event was lost, those the naive consumer serves wrong; found: objects whose state in the bucket differs from cairn's ledger",
		r.NewestLost)
	var why []string
	if r.LostNoChange > 0 {
		why = append(why, fmt.Sprintf("%d lost event(s) changed nothing (as a delete after a delete), so the audit had nothing to find", r.LostNoChange))
	}
	if r.NaiveRightByChance > 0 {
		why = append(why, fmt.Sprintf("the naive consumer serves %d right by chance (an out-of-order delivery left the key as the bucket has it)", r.NaiveRightByChance))
	}
	if len(why) > 0 {
		s += "; they differ because " + strings.Join(why, " and ")
	}
	return s + "."
}
