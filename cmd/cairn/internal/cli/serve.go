package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/auditjob"
	_ "github.com/cairn-s3/cairn/intake/kafkasrc" // kafka:// sources
	_ "github.com/cairn-s3/cairn/intake/natssrc"  // nats:// sources
	"github.com/cairn-s3/cairn/intake/sqssrc"     // sqs:// sources, and --sqs-queue-url
	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// serveFlags are cairn serve's settings (also from CAIRN_* and --config).
type serveFlags struct {
	ledgerURL     string
	listen        string
	token         string
	sources       []string
	origins       []string
	sqsQueueURL   string
	handlerExec   string
	handlerHTTP   string
	concurrency   int
	lease         time.Duration
	timeout       time.Duration
	grace         time.Duration
	maxAttempts   int
	everyVersion  bool
	maxBody       int64
	config        string
	storeURL      string
	bucket        string
	auditEvery    time.Duration
	auditGrace    time.Duration
	retention     time.Duration
	operator      string
	readToken     string
	statusOrigins []string
	handlerState  string
	processOwn    bool
}

func (f *serveFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	nonEmptyVar(fs, &f.ledgerURL, "ledger", ledger.DefaultURL, "ledger URL: a path or sqlite:///path.db (embedded), postgres://…, s3://bucket/prefix / file:///dir (in the object store), or dynamodb://TABLE?region=… (a DynamoDB table)", "drop --ledger for the default ("+ledger.DefaultURL+")")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8470", "address for the webhook, /healthz, /readyz and /metrics")
	nonEmptyVar(fs, &f.token, "webhook-token", "", "bearer token the webhook requires (required when --listen is not loopback)", "an empty token would leave the webhook open; drop the flag to run without one (loopback only)")
	fs.StringArrayVar(&f.origins, "webhook-allow-origin", nil, "browser origin (scheme://host[:port]) whose requests the webhook accepts, repeatable; requests from any other web page are refused (event senders send no Origin)")
	nonEmptyArrayVar(fs, &f.sources, "source", "pull source URL, repeatable: nats://HOST:PORT?stream=S&subject=X&durable=D, kafka://HOST:PORT?topic=T&group=G, sqs://QUEUE-URL-WITHOUT-SCHEME", "name a source URL")
	nonEmptyVar(fs, &f.sqsQueueURL, "sqs-queue-url", "", "SQS queue URL to receive from (same as --source sqs://…)", "name the queue")
	nonEmptyVar(fs, &f.handlerExec, "handler-exec", "", "command run per claim by /bin/sh -c (exit 0 processed, 75 retry, other failure)", "name the command to run")
	nonEmptyVar(fs, &f.handlerHTTP, "handler-http", "", "URL each claim is POSTed to (2xx processed, 429/5xx retry, other failure)", "name the endpoint")
	fs.IntVar(&f.concurrency, "concurrency", 16, "handlers running at once")
	durflag.Var(fs, &f.lease, "lease", 30*time.Second, "claim lease, renewed every third of it while a handler runs")
	durflag.Var(fs, &f.timeout, "handler-timeout", 0, "kill a handler attempt after this long and retry it (0: no limit)")
	durflag.Var(fs, &f.grace, "grace", 10*time.Second, "at shutdown, how long running handlers may finish before their work is released")
	fs.IntVar(&f.maxAttempts, "max-attempts", 5, "attempts before a record is dead (a dead letter)")
	fs.BoolVar(&f.everyVersion, "every-version", false, "process every version of a key (versioned buckets) instead of the latest state")
	fs.Int64Var(&f.maxBody, "max-body", 4<<20, "largest webhook body accepted, bytes")
	nonEmptyVar(fs, &f.config, "config", "", "YAML file of settings (keys are these flags' names)", "name the file, or drop --config")
	nonEmptyVar(fs, &f.storeURL, "store", "", "the bucket the events are about (store URL), for --audit-every", "name the store, or drop --store")
	nonEmptyVar(fs, &f.bucket, "bucket", "", "bucket name the events carry (default: the s3:// --store URL's bucket)", "name the bucket, or drop --bucket")
	durflag.Var(fs, &f.auditEvery, "audit-every", 0, "audit the --store bucket against the ledger this often and resubmit what events never announced (0: never)")
	durflag.Var(fs, &f.auditGrace, "audit-grace", 15*time.Minute, "the audit skips objects modified more recently")
	nonEmptyVar(fs, &f.operator, "operator-token", "", "token the status page's actions (Replay, Replay all) and POST /api/v1/replay require (it also grants reading); none: read-only", "an empty token would be no token; drop the flag for a read-only status page")
	nonEmptyVar(fs, &f.readToken, "read-token", "", "token that reading the status page (GET /) and GET /api/v1/status requires: a browser signs in with any user name and the token as the password, API clients send Authorization: Bearer TOKEN; none: anyone who reaches --listen can read keys and handler errors", "an empty token would let anyone read; drop the flag to mean that")
	fs.StringArrayVar(&f.statusOrigins, "status-allow-origin", nil, "origin (scheme://host[:port]) besides the status page's own whose Replay form posts are accepted, repeatable: e.g. the https origin a TLS-terminating proxy serves the page at")
	nonEmptyVar(fs, &f.handlerState, "handler-state", "", "directory where running exec handlers are recorded, so that a restart kills what a killed daemon left running (default: beside a SQLite or file:// ledger, else $XDG_STATE_HOME/cairn/handlers)", "name the directory, or drop the flag for the default")
	fs.BoolVar(&f.processOwn, "process-own-objects", false, "run the handler for events about cairn's own objects too, which are skipped by default: keys under cairn-probe/, cairn-locks/, cairn-journal/, cairn-ledger/ at the bucket's root (and under an s3:// --store's prefix), and an s3:// --ledger's own prefix")
	durflag.Var(fs, &f.retention, "retention", 30*24*time.Hour, "purge processed records older than this, hourly (0: never); the audit's horizon")
}

func serveCmd(e *env) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve (--handler-exec CMD | --handler-http URL) [flags]",
		Short: "Run the intake daemon: receive object-change events, decide through the ledger, run your handler",
		Long: `cairn serve sits between a bucket's event notifications and your processing
code, so that every object change is processed once, in order per key, by one
worker at a time, with nothing lost when anything crashes.

Events arrive by webhook (POST /v1/events: MinIO's webhook target as-is, S3
Records, SNS, EventBridge) and from pull sources (--source nats://…, kafka://…,
sqs://…). Deliveries are acknowledged only once recorded in the ledger. A
message cairn cannot accept is acknowledged too (a sender retrying it would hold
back every later event) and kept as a dead letter in bucket cairn:refused, with
its reason: cairn ledger ls --status dead lists it, cairn replay parses it again.
Events for cairn's own objects (cairn-probe/, cairn-locks/, cairn-journal/,
cairn-ledger/) are skipped (--process-own-objects). Workers claim work from the
ledger with a lease and a fencing token and run the handler:

  --handler-exec 'CMD ARGS'  run by /bin/sh -c with CAIRN_BUCKET, CAIRN_KEY,
      CAIRN_VERSION_ID, CAIRN_ETAG, CAIRN_SIZE, CAIRN_SEQUENCER, CAIRN_EVENT
      (created/removed), CAIRN_FENCING_TOKEN, CAIRN_ATTEMPT, and the event as
      JSON on stdin. Exit 0 processed, 75 retry later, other: failure (dead letter).
      The handler's whole process group dies with its run, at its lease's
      deadline (no renewal confirmed within --lease, less a twentieth or
      0.5s if more (--lease is at least 2s), since
      the last was sent; even while cairn is stopped: its watchdog holds the
      deadline) and with cairn (even kill -9, on Linux); a restart first kills
      what a killed cairn left running (recorded in --handler-state), so a
      key's handlers never overlap.
  --handler-http URL  POST of the event JSON, token in Cairn-Fencing-Token,
      the lease's deadline in Cairn-Lease-Deadline (RFC 3339): stop by then.
      2xx processed, 429/5xx retry later, other: failure.

Every flag can also be set by environment (CAIRN_ and the flag name in upper
case, dashes as underscores: CAIRN_WEBHOOK_TOKEN) or in a YAML --config file.
Also served: GET /healthz, GET /readyz (ledger reachable and recording), GET /metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := newHandler(f.handlerExec, f.handlerHTTP)
			if err != nil {
				return err
			}
			log := e.log
			if !cmd.Flags().Changed("log-level") {
				log = e.logger(slog.LevelInfo)
			}
			return runServe(cmd.Context(), log, f, h, nil)
		},
	}
	f.register(cmd)
	return cmd
}

// newHandler is the handler --handler-exec or --handler-http names (serve
// and lambda): exactly one of them must be given.
func newHandler(execCmd, httpURL string) (intake.Handler, error) {
	switch {
	case execCmd != "" && httpURL != "":
		return nil, usagef("give one of --handler-exec and --handler-http")
	case execCmd != "":
		x := intake.Shell(execCmd)
		if bin, err := os.Executable(); err == nil && intake.WatchdogServed() {
			x.Watchdog = bin // kills the handlers the moment cairn dies
		}
		return x, nil
	case httpURL != "":
		u, err := url.Parse(httpURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("--handler-http %q: want an http:// or https:// URL", safetext.Redact(httpURL))
		}
		return &intake.HTTPHandler{URL: httpURL}, nil
	}
	return nil, usagef("a handler is required: --handler-exec 'CMD ARGS' or --handler-http URL")
}

// runServe runs the daemon with handler h; onListen, if set, is told the
// address once the webhook listens.
func runServe(ctx context.Context, log *slog.Logger, f serveFlags, h intake.Handler, onListen func(addr string)) error {
	if f.concurrency <= 0 || f.maxAttempts <= 0 {
		return usagef("--concurrency and --max-attempts must be positive")
	}
	if f.lease < intake.MinLease {
		return usagef("--lease %v is too short: a handler is stopped %v before its lease can have expired; give --lease %v or more", f.lease, intake.MinLeaseMargin, intake.MinLease)
	}
	if f.listen != "" && f.token == "" && !loopback(f.listen) {
		return usagef("--listen %s is not a loopback address: set --webhook-token (or CAIRN_WEBHOOK_TOKEN) so strangers cannot inject events", f.listen)
	}
	var auditStore *objstore.Store
	if f.auditEvery > 0 {
		if f.storeURL == "" {
			return usagef("--audit-every needs --store URL (the bucket to audit)")
		}
		if f.bucket == "" {
			if u, err := objstore.ParseURL(f.storeURL); err == nil && u.Scheme == "s3" {
				f.bucket = u.Host
			} else {
				return usagef("--audit-every with a non-s3 --store needs --bucket NAME (the bucket name events carry)")
			}
		}
		s, err := openStore(ctx, f.storeURL)
		if err != nil {
			return err
		}
		defer s.Close()
		auditStore = s
	}
	var sources []intake.Source
	for _, raw := range f.sources {
		s, err := openSource(ctx, raw, log)
		if err != nil {
			return err
		}
		sources = append(sources, s)
	}
	if f.sqsQueueURL != "" {
		// The queue URL keeps its scheme (SQS-compatible servers over http).
		s, err := sqssrc.Open(ctx, f.sqsQueueURL, &sqssrc.Options{Logger: log})
		if err != nil {
			return usagef("--sqs-queue-url: %s", safetext.Redact(err.Error()))
		}
		sources = append(sources, s)
	}
	led, err := ledger.Open(ctx, f.ledgerURL, &ledger.Options{MaxAttempts: f.maxAttempts, EveryVersion: f.everyVersion})
	if err != nil {
		return err
	}
	defer led.Close()
	wo := &web.Options{OperatorToken: f.operator, ReadToken: f.readToken, AllowedOrigins: f.statusOrigins}
	if err := wo.Check(); err != nil {
		return usagef("--status-allow-origin: %v", err)
	}
	if f.listen != "" && !loopback(f.listen) && f.readToken == "" {
		log.Warn("the status page and /api/v1/status (keys, handler errors) are readable by anyone who reaches --listen; set --read-token to require a token", "listen", f.listen)
	}
	if x, ok := h.(*intake.ExecHandler); ok {
		if err := reapHandlers(ctx, log, x, cmp.Or(f.handlerState, defaultHandlerState(f.ledgerURL))); err != nil {
			return err
		}
		defer x.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := intake.New(led, h, &intake.Options{Concurrency: f.concurrency, Lease: f.lease, Timeout: f.timeout,
		Grace: f.grace, Registerer: reg, Logger: log, ProcessOwnObjects: f.processOwn, OwnPrefixes: ownPrefixes(&f)})
	if err != nil {
		return err
	}
	d := &intake.Daemon{Pipeline: p, Sources: sources, Logger: log,
		Webhook: intake.WebhookOptions{Token: f.token, MaxBody: f.maxBody, AllowedOrigins: f.origins},
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}
	if f.listen != "" {
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", f.listen, err)
		}
		d.Listener = ln
		if onListen != nil {
			onListen(ln.Addr().String())
		}
	}
	startAttrs := []any{"ledger", safetext.Redact(f.ledgerURL)}
	if p, ok := localLedgerFile(f.ledgerURL); ok {
		// A relative path (the default ledger is one) is relative to the
		// directory serve was started in: say which file that is.
		startAttrs = append(startAttrs, "ledger_file", p)
	}
	log.Info("cairn serve started", append(startAttrs, "sources", len(sources), "concurrency", f.concurrency, "lease", f.lease)...)
	if auditStore != nil {
		horizon := f.retention
		if horizon <= 0 {
			horizon = -1
		}
		// The audit records into the ledger itself, not through the
		// pipeline's Submit: it skips cairn's own objects alike.
		skipOwn := ownSkipper(f.ledgerURL, f.storeURL, f.bucket, f.processOwn)
		d.Jobs = append(d.Jobs, auditjob.New(auditStore, led, f.bucket, f.auditEvery,
			&auditjob.Options{Audit: &audit.Options{Grace: f.auditGrace, Horizon: horizon, Skip: skipOwn}, Logger: log}))
	}
	wo.Refusals = func() []web.Refusal {
		var out []web.Refusal
		for _, r := range p.Refusals() {
			out = append(out, web.Refusal{Source: r.Source, Reason: r.Reason, Count: r.Count, First: r.First, Last: r.Last, Answer: r.Answer, Detail: r.Detail})
		}
		return out
	}
	wo.RefusedTotal = p.RefusedTotal
	wo.RecentRefusals = func() []web.RecentRefusal {
		var out []web.RecentRefusal
		for _, r := range p.RecentRefusals() {
			out = append(out, web.RecentRefusal(r))
		}
		return out
	}
	// The last audit, however it was run (this job, cairn audit, another
	// process), is the one its summary in the ledger names: the page reads it.
	wo.Activity = p.Activity
	d.Extra = func(mux *http.ServeMux) {
		web.Mount(mux, led, wo)
	}
	d.Retention = f.retention
	err = d.Run(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	log.Info("cairn serve stopped")
	return err
}

// reapHandlers records x's runs in the handler state directory stateDir (if
// x has none yet) and, before anything is claimed, kills and waits out
// whatever a previous daemon on this machine left running there (killed with
// kill -9, its watchdog too), so that no claim starts beside its previous
// holder's orphaned handler.
func reapHandlers(ctx context.Context, log *slog.Logger, x *intake.ExecHandler, stateDir string) error {
	if x.StateDir == "" {
		x.StateDir = stateDir
	}
	if err := os.MkdirAll(x.StateDir, 0o700); err != nil {
		return fmt.Errorf("--handler-state: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := x.Reap(rctx)
	if err != nil {
		return fmt.Errorf("refusing to claim work: %w", err)
	}
	if n > 0 {
		log.Warn("killed exec handler processes a dead daemon left running", "processes", n, "state", x.StateDir)
	}
	return nil
}

// defaultHandlerState is the handler state directory: beside a local ledger
// (SQLite, file://), else under $XDG_STATE_HOME (or ~/.local/state).
func defaultHandlerState(ledgerURL string) string {
	if ledgerURL == "" {
		ledgerURL = ledger.DefaultURL
	}
	scheme, rest, ok := strings.Cut(ledgerURL, "://")
	switch {
	case !ok:
		rest = ledgerURL
	case scheme == "sqlite" || scheme == "file":
		rest, _, _ = strings.Cut(rest, "?")
	default:
		rest = ""
	}
	if rest != "" {
		if abs, err := filepath.Abs(filepath.FromSlash(rest)); err == nil {
			return filepath.Clean(abs) + ".handlers"
		}
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "cairn", "handlers")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "cairn", "handlers")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cairn-%d", os.Getuid()), "handlers")
}

// loopback reports whether a listen address only accepts local connections.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openSource opens a pull source by URL scheme (intake.OpenSource: the source
// packages linked in above register nats://, kafka:// and sqs://).
func openSource(ctx context.Context, raw string, log *slog.Logger) (intake.Source, error) {
	s, err := intake.OpenSource(ctx, raw, &intake.OpenSourceOptions{Logger: log})
	if err != nil {
		return nil, usagef("--source %q: %s", safetext.Redact(raw), safetext.Redact(err.Error()))
	}
	return s, nil
}

// ownPrefixes are the prefixes of cairn's own objects serve knows of beyond
// cairn.OwnPrefixes, per bucket: where an s3:// --ledger keeps the ledger
// (a bare bucket keeps it under cairn-ledger/, skipped anyway), and
// cairn.OwnPrefixes under an s3:// --store's prefix (the probe, locks and
// journals of a store rooted there).
func ownPrefixes(f *serveFlags) map[string][]string { return ownPrefixesFor(f.ledgerURL, f.storeURL) }

// ownSkipper reports the keys of bucket that are cairn's own objects (at the
// bucket's root, under an s3:// store's prefix, or an s3:// ledger's), for
// the audit, which records into the ledger without the pipeline's Submit;
// nil with processOwn.
func ownSkipper(ledgerURL, storeURL, bucket string, processOwn bool) func(key string) bool {
	if processOwn {
		return nil
	}
	extra := ownPrefixesFor(ledgerURL, storeURL)[bucket]
	return func(key string) bool {
		if _, own := cairn.OwnKey(key); own {
			return true
		}
		return slices.ContainsFunc(extra, func(p string) bool { return strings.HasPrefix(key, p) })
	}
}

// ownPrefixesFor is ownPrefixes of a ledger and a store URL.
func ownPrefixesFor(ledgerURL, storeURL string) map[string][]string {
	m := map[string][]string{}
	if u, err := url.Parse(ledgerURL); err == nil && u.Scheme == "s3" && u.Host != "" {
		if p := strings.Trim(u.Path, "/"); p != "" {
			m[u.Host] = append(m[u.Host], p+"/")
		}
	}
	if storeURL != "" {
		if u, err := objstore.ParseURL(storeURL); err == nil && u.Scheme == "s3" && u.Host != "" {
			if p := strings.Trim(u.Path, "/"); p != "" {
				for _, own := range cairn.OwnPrefixes() {
					m[u.Host] = append(m[u.Host], p+"/"+own)
				}
			}
		}
	}
	return m
}

// localLedgerFile is the absolute path of a SQLite ledger's file (a plain
// path or sqlite://PATH), resolved against the current directory; ok is
// false for other ledgers.
func localLedgerFile(ledgerURL string) (string, bool) {
	p := ledgerURL
	if rest, ok := strings.CutPrefix(ledgerURL, "sqlite://"); ok {
		p, _, _ = strings.Cut(rest, "?")
	} else if strings.Contains(ledgerURL, "://") {
		return "", false
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", false
	}
	return abs, true
}
