package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/auditjob"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// BootstrapName is the file name Lambda's custom runtimes (provided.al2023)
// run: a cairn binary named so runs `cairn lambda`.
const BootstrapName = "bootstrap"

// Args is the command line Main runs for a process started as argv: argv
// without the program's name, and for a binary named bootstrap (a Lambda
// custom runtime's entry point, which Lambda starts with no arguments) the
// lambda command with the arguments given, if any.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	args := argv[1:]
	if filepath.Base(argv[0]) != BootstrapName || (len(args) > 0 && args[0] == "lambda") {
		return args
	}
	return append([]string{"lambda"}, args...)
}

// lambdaFlags are cairn lambda's settings (also from CAIRN_* and --config or
// CAIRN_CONFIG: a function's environment is how Lambda configures it).
type lambdaFlags struct {
	ledgerURL    string
	handlerExec  string
	handlerHTTP  string
	concurrency  int
	lease        time.Duration
	timeout      time.Duration
	stopBefore   time.Duration
	maxAttempts  int
	everyVersion bool
	poison       string
	retention    time.Duration
	storeURL     string
	bucket       string
	audit        bool
	auditGrace   time.Duration
	handlerState string
	processOwn   bool
	config       string
	// localLedger (hidden) accepts a ledger on this machine's disk: every
	// sandbox runs here (cairn demo --lambda, under the Runtime Interface
	// Emulator).
	localLedger bool
	// benchBypass (hidden, bench-only) runs the handler once per event with
	// no ledger at all: cairn bench lambda's baseline.
	benchBypass bool
}

func (f *lambdaFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	nonEmptyVar(fs, &f.ledgerURL, "ledger", "", "ledger URL every sandbox shares: s3://bucket/prefix (in the bucket itself), postgres://…, or dynamodb://TABLE?region=… (a SQLite file, file:// or mem:// ledger is refused: each sandbox has its own)", "name the ledger: s3://BUCKET/PREFIX, postgres://… or dynamodb://TABLE")
	nonEmptyVar(fs, &f.handlerExec, "handler-exec", "", "command run per claim by /bin/sh -c, in the function's directory (exit 0 processed, 75 retry, other failure)", "name the command to run")
	nonEmptyVar(fs, &f.handlerHTTP, "handler-http", "", "URL each claim is POSTed to (2xx processed, 429/5xx retry, other failure)", "name the endpoint")
	fs.IntVar(&f.concurrency, "concurrency", intake.DefaultConcurrency, "handlers running at once in one invocation")
	durflag.Var(fs, &f.lease, "lease", 0, "claim lease, renewed every third of it while a handler runs (0: the invocation's time, at most 30s; a longer lease keeps a key a killed invocation held longer)")
	durflag.Var(fs, &f.timeout, "handler-timeout", 0, "stop a handler attempt after this long and retry it (0: at --stop-before the invocation's deadline)")
	durflag.Var(fs, &f.stopBefore, "stop-before", 0, "stop handlers and settle their outcomes this long before the invocation's deadline (0: a tenth of the invocation's time, between 500ms and 5s)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 5, "attempts before a record is dead (a dead letter)")
	fs.BoolVar(&f.everyVersion, "every-version", false, "process every version of a key (versioned buckets) instead of the latest state")
	nonEmptyVar(fs, &f.poison, "poison", string(awslambda.PoisonDLQ), "an SQS message that is no event: dlq (report it failed, alone, for the queue's redrive policy) or ledger (keep it in the ledger as a dead letter and acknowledge it)", "give dlq or ledger")
	durflag.Var(fs, &f.retention, "retention", 30*24*time.Hour, "a scheduled jobs invocation ({\"cairn\":\"jobs\"}) purges processed records older than this (0: never); the audit's horizon")
	nonEmptyVar(fs, &f.storeURL, "store", "", "the bucket the events are about (store URL), for --audit", "name the store, or drop --store")
	nonEmptyVar(fs, &f.bucket, "bucket", "", "bucket name the events carry (default: the s3:// --store URL's bucket)", "name the bucket, or drop --bucket")
	fs.BoolVar(&f.audit, "audit", false, "each scheduled jobs invocation ({\"cairn\":\"jobs\"}) audits the --store bucket against the ledger (a LIST) and runs what events never announced")
	durflag.Var(fs, &f.auditGrace, "audit-grace", 15*time.Minute, "the audit skips objects modified more recently")
	nonEmptyVar(fs, &f.handlerState, "handler-state", "", "directory where running exec handlers are recorded (default: cairn/handlers under $TMPDIR or /tmp, the only writable place in Lambda)", "name the directory, or drop the flag for the default")
	fs.BoolVar(&f.processOwn, "process-own-objects", false, "run the handler for events about cairn's own objects too, which are skipped by default: keys under cairn-probe/, cairn-locks/, cairn-journal/, cairn-ledger/ at the bucket's root (and under an s3:// --store's prefix), and an s3:// --ledger's own prefix")
	nonEmptyVar(fs, &f.config, "config", "", "YAML file of settings (keys are these flags' names); also CAIRN_CONFIG", "name the file, or drop --config")
	fs.BoolVar(&f.localLedger, "local-ledger", false, "accept a ledger on this machine's disk (file://, SQLite): only for sandboxes that all run on one machine, as under the Runtime Interface Emulator (cairn demo --lambda)")
	fs.BoolVar(&f.benchBypass, "bench-bypass", false, "benchmarks only: run the handler once per event delivered, with no ledger (no deduplication, ordering, fencing or retries): cairn bench lambda's baseline")
	_ = fs.MarkHidden("local-ledger")
	_ = fs.MarkHidden("bench-bypass")
}

func lambdaCmd(e *env) *cobra.Command {
	var f lambdaFlags
	cmd := &cobra.Command{
		Use:   "lambda (--handler-exec CMD | --handler-http URL) --ledger URL [flags]",
		Short: "Run as an AWS Lambda custom runtime's bootstrap: S3 events to your handler, once, in order per key",
		Long: `cairn lambda is the bootstrap of an AWS Lambda function on a custom runtime
(provided.al2023): deploy the cairn binary as the function's "bootstrap"
(a binary named bootstrap runs this command) and configure it through the
function's environment: CAIRN_ and a flag's name in upper case, dashes as
underscores (CAIRN_LEDGER, CAIRN_HANDLER_EXEC, CAIRN_CONCURRENCY, CAIRN_POISON,
CAIRN_LOG_LEVEL, …), or a YAML file named by CAIRN_CONFIG.

Each invocation — S3 notifications directly, an SQS batch (standard or FIFO),
SNS, EventBridge "Object Created"/"Object Deleted" — records its events in the
ledger, answers the event source (an SQS batch with batchItemFailures naming
exactly the messages not recorded: turn ReportBatchItemFailures on), then runs
the handler for each key's newest accepted event, once, in order, never
overlapping, with a fencing token, until nothing is left it can run or
--stop-before its deadline. A scheduled drain (an EventBridge schedule, e.g.
rate(1 minute), sending {"cairn":"drain"} to the same function) runs the
rest: retries, work whose key was busy, keys of killed invocations; a slower
schedule sending {"cairn":"jobs"} runs the --audit and the --retention purge,
then drains.

The handlers are serve's:

  --handler-exec 'CMD ARGS'  run by /bin/sh -c with CAIRN_BUCKET, CAIRN_KEY,
      CAIRN_VERSION_ID, CAIRN_ETAG, CAIRN_SIZE, CAIRN_SEQUENCER, CAIRN_EVENT,
      CAIRN_FENCING_TOKEN, CAIRN_ATTEMPT and the event as JSON on stdin. Exit 0
      processed, 75 retry later, other: failure (dead letter). Its process
      group dies at its lease's deadline, even if Lambda kills cairn first (a
      watchdog process holds the deadline; running handlers are recorded in
      --handler-state, under /tmp).
  --handler-http URL  POST of the event JSON, token in Cairn-Fencing-Token,
      the lease's deadline in Cairn-Lease-Deadline: stop by then.

The ledger must be one every sandbox shares: s3://bucket/prefix (the bucket
itself, no database), postgres://… or dynamodb://TABLE. A SQLite file (the
default of other commands), file:// or mem:// ledger is refused: each sandbox
has its own disk, so concurrent invocations would not see each other's
claims and a duplicate would run twice. Outside Lambda (no
AWS_LAMBDA_RUNTIME_API) it exits 1 saying so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.setup()
			if err != nil {
				return err
			}
			log := e.log
			if !cmd.Flags().Changed("log-level") {
				log = e.logger(slog.LevelInfo)
			}
			return lambdaRun(cmd.Context(), log, s)
		},
	}
	f.register(cmd)
	return cmd
}

// lambdaSetup is what cairn lambda runs, from its flags: checked, nothing
// opened yet.
type lambdaSetup struct {
	ledgerURL string
	ledger    ledger.Options
	handler   intake.Handler
	stateDir  string            // an exec handler's state directory
	options   awslambda.Options // Jobs and Logger are set once opened
	audit     *lambdaAudit      // nil: no audit on a jobs invocation
	// bypass: --bench-bypass, no ledger (lambda_bypass.go).
	bypass bool
}

// lambdaAudit is the jobs invocation's audit job, from --audit.
type lambdaAudit struct {
	storeURL, bucket string
	options          audit.Options // Skip is set from the setup's URLs
}

// lambdaRun runs a setup; tests replace it to see what the flags, the
// environment and the config file made of it.
var lambdaRun = runLambda

// setup checks f and says what cairn lambda runs.
func (f *lambdaFlags) setup() (*lambdaSetup, error) {
	h, err := newHandler(f.handlerExec, f.handlerHTTP)
	if err != nil {
		return nil, err
	}
	if f.benchBypass {
		return &lambdaSetup{handler: h, bypass: true, options: awslambda.Options{Pipeline: intake.Options{Concurrency: max(f.concurrency, 1)}}}, nil
	}
	if err := checkSharedLedger(f.ledgerURL); err != nil && !f.localLedger {
		return nil, err
	}
	if f.concurrency <= 0 || f.maxAttempts <= 0 {
		return nil, usagef("--concurrency and --max-attempts must be positive")
	}
	if f.lease != 0 && f.lease < intake.MinLease {
		return nil, usagef("--lease %v is too short: a handler is stopped %v before its lease can have expired; give --lease %v or more, or drop it (the invocation's time, at most %v)", f.lease, intake.MinLeaseMargin, intake.MinLease, intake.DefaultLease)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--handler-timeout", f.timeout}, {"--stop-before", f.stopBefore}, {"--retention", f.retention}, {"--audit-grace", f.auditGrace}} {
		if d.v < 0 {
			return nil, usagef("%s %v is negative: give a duration of 0 or more", d.name, d.v)
		}
	}
	poison := awslambda.Poison(strings.ToLower(f.poison))
	if poison != awslambda.PoisonDLQ && poison != awslambda.PoisonLedger {
		return nil, usagef("--poison %q: give %s (report the message failed, for the queue's redrive policy) or %s (keep it as a dead letter in the ledger)", safetext.Escape(f.poison), awslambda.PoisonDLQ, awslambda.PoisonLedger)
	}
	s := &lambdaSetup{
		ledgerURL: f.ledgerURL,
		ledger:    ledger.Options{MaxAttempts: f.maxAttempts, EveryVersion: f.everyVersion},
		handler:   h,
		options: awslambda.Options{
			Pipeline: intake.Options{Concurrency: f.concurrency, Lease: f.lease, Timeout: f.timeout,
				ProcessOwnObjects: f.processOwn, OwnPrefixes: ownPrefixesFor(f.ledgerURL, f.storeURL)},
			StopBefore: f.stopBefore,
			Poison:     poison,
			Retention:  f.retention,
		},
	}
	if _, ok := h.(*intake.ExecHandler); ok {
		s.stateDir = cmp.Or(f.handlerState, filepath.Join(os.TempDir(), "cairn", "handlers"))
	}
	if f.audit {
		if f.storeURL == "" {
			return nil, usagef("--audit needs --store URL (CAIRN_STORE): the bucket to audit")
		}
		bucket := f.bucket
		if bucket == "" {
			if u, err := objstore.ParseURL(f.storeURL); err == nil && u.Scheme == "s3" {
				bucket = u.Host
			} else {
				return nil, usagef("--audit with a non-s3 --store needs --bucket NAME (CAIRN_BUCKET): the bucket name events carry")
			}
		}
		horizon := f.retention
		if horizon <= 0 {
			horizon = -1
		}
		s.audit = &lambdaAudit{storeURL: f.storeURL, bucket: bucket, options: audit.Options{Grace: f.auditGrace, Horizon: horizon}}
	}
	return s, nil
}

// checkSharedLedger refuses a ledger that lives in one Lambda sandbox.
func checkSharedLedger(raw string) error {
	what := ""
	scheme, _, ok := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "sqlite":
		what = "a SQLite file"
	case "file":
		what = "a local directory"
	case "mem":
		what = "in memory"
	}
	if !ok {
		what = "a SQLite file"
	}
	if what == "" {
		return nil
	}
	which := "--ledger " + safetext.Redact(raw) + " is " + what
	if raw == "" {
		which = "no --ledger (CAIRN_LEDGER) is given, and the default (" + ledger.DefaultURL + ") is a SQLite file"
	}
	return usagef("%s: in AWS Lambda each sandbox has its own ephemeral disk and memory, so that ledger would not be shared between concurrent invocations and a duplicate event would run twice; "+
		"set CAIRN_LEDGER to a shared one: s3://BUCKET/PREFIX (in the bucket itself, no database), postgres://USER@HOST/DB, or dynamodb://TABLE?region=REGION", which)
}

// runLambda opens what s names and serves Lambda invocations; it returns
// only when that fails.
func runLambda(ctx context.Context, log *slog.Logger, s *lambdaSetup) error {
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return fmt.Errorf("AWS_LAMBDA_RUNTIME_API is not set: cairn lambda runs as an AWS Lambda function's bootstrap (or under the Lambda Runtime Interface Emulator), not on its own; to run cairn on a machine use cairn serve")
	}
	if s.bypass {
		return runBypass(log, s.handler, s.options.Pipeline.Concurrency)
	}
	led, err := ledger.Open(ctx, s.ledgerURL, &s.ledger)
	if err != nil {
		return err
	}
	defer led.Close()
	if x, ok := s.handler.(*intake.ExecHandler); ok {
		if err := reapHandlers(ctx, log, x, s.stateDir); err != nil {
			return err
		}
		defer x.Close()
	}
	o := s.options
	o.Logger = log
	if a := s.audit; a != nil {
		st, err := openStore(ctx, a.storeURL)
		if err != nil {
			return err
		}
		defer st.Close()
		ao := a.options
		ao.Skip = ownSkipper(s.ledgerURL, a.storeURL, a.bucket, s.options.Pipeline.ProcessOwnObjects)
		o.Jobs = append(o.Jobs, auditjob.New(st, led, a.bucket, 0, &auditjob.Options{Audit: &ao, Logger: log}))
	}
	fn, err := awslambda.New(led, s.handler, &o)
	if err != nil {
		return err
	}
	log.Info("cairn lambda started", "ledger", safetext.Redact(s.ledgerURL), "concurrency", o.Pipeline.Concurrency,
		"poison", o.Poison, "audit", s.audit != nil)
	return fn.Start()
}
