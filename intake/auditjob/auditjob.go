// Package auditjob runs cairn's audit (package audit: LIST the bucket, compare
// with the ledger, resubmit what no event announced) as a periodic job of an
// intake.Daemon, as `cairn serve --audit-every` does.
//
// It is a package of its own because of the direction of imports: audit sits
// above intake (it reads the ledger and the store, and the status page in
// intake/web shows its reports), so package intake takes periodic work as an
// intake.Job and knows nothing of audits; this adapter builds that Job.
//
// # Guarantees
//
//   - One audit runs at a time; the first runs one interval after the daemon
//     starts, and the audits stop when the daemon's Run returns.
//   - Each finished audit is logged ("audit done", at warning level when it
//     resubmitted anything: events were lost) and handed to Options.OnReport.
//
// # Errors
//
// A failed audit is logged by the daemon as "audit failed" with its error and
// tried again at the next interval; it never stops the daemon.
package auditjob

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// Options configure the job; nil means the defaults.
type Options struct {
	// Audit configures each audit (prefixes, grace, horizon, …). Default nil:
	// audit.Run's defaults.
	Audit *audit.Options
	// Logger receives "audit done" lines. Default: discarded.
	Logger *slog.Logger
	// OnReport is given every finished audit's report (e.g. to show the last
	// one on the status page). Default: none.
	OnReport func(*audit.Report)
}

// New returns a job auditing s, whose events carry the bucket name bucket,
// against the ledger l every interval (audit.Run's arguments). The daemon's
// Logger logs failures; opts.Logger should be the same logger.
func New(s *objstore.Store, l *ledger.Ledger, bucket string, every time.Duration, opts *Options) intake.Job {
	var op Options
	if opts != nil {
		op = *opts
	}
	log := op.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var ao audit.Options
	if op.Audit != nil {
		ao = *op.Audit
	}
	if ao.By == "" {
		ao.By = "serve " + whoAmI() // in the ledger's summary of each audit
	}
	return intake.Job{Name: "audit", Every: every, Run: func(ctx context.Context) error {
		rep, err := audit.Run(ctx, s, l, bucket, &ao)
		if err != nil {
			return err
		}
		if op.OnReport != nil {
			op.OnReport(rep)
		}
		lvl := slog.LevelInfo
		if rep.Resubmitted > 0 {
			lvl = slog.LevelWarn // events were lost
		}
		if rep.SummaryError != "" {
			log.Warn("the audit's summary was not kept in the ledger: the status page shows an older one", "err", rep.SummaryError)
		}
		log.Log(ctx, lvl, "audit done", "listed", rep.Listed, "resubmitted", rep.Resubmitted, "missing", rep.Counts[audit.Missing],
			"changed", rep.Counts[audit.Changed], "gone", rep.Counts[audit.Gone], "dead", rep.Counts[audit.Dead], "seconds", rep.Seconds)
		return nil
	}}
}

// whoAmI is this process as host/pid.
func whoAmI() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}
