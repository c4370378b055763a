package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// Summary is what every audit leaves in its ledger, under ledger.AuditNote
// (a note: see ledger.NoteKeeper), however it was run — cairn audit, cairn
// serve's audit job, a program calling Run — so that every process using the
// ledger can tell when the last audit ran, who ran it, whether it was a dry
// run and what it found (the status page and its API show it). Each audit
// replaces the last one's. A failed audit leaves one too, with Error and what
// it had found until then.
type Summary struct {
	Bucket   string    `json:"bucket"`
	Prefixes []string  `json:"prefixes,omitempty"`
	By       string    `json:"by"` // Options.By: host/pid, or "serve host/pid"
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	DryRun   bool      `json:"dry_run"`
	Listed   int64     `json:"listed"`
	// Counts per class, as Report's; Resubmitted: with DryRun, what a
	// real run would have resubmitted.
	Counts      map[string]int `json:"counts"`
	Resubmitted int            `json:"resubmitted"`
	// Findings are the report's first findings that call for attention
	// (not too young, too old or current), at most SummaryFindings and as
	// many as fit in a note; MoreFindings how many more the report had.
	Findings     []Finding `json:"findings,omitempty"`
	MoreFindings int       `json:"more_findings,omitempty"`
	// Error is why the audit stopped, if it failed.
	Error string `json:"error,omitempty"`
}

// SummaryFindings is the most findings a Summary keeps.
const SummaryFindings = 20

// LastSummary reads the last audit's Summary from the ledger; nil if no
// audit has left one.
func LastSummary(ctx context.Context, l *ledger.Ledger) (*Summary, error) {
	b, err := l.Note(ctx, ledger.AuditNote)
	if err != nil || b == nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("audit: the last audit's summary in the ledger is not one: %w", err)
	}
	return &s, nil
}

// whoAmI is this process as host/pid.
func whoAmI() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// recordSummary keeps rep's summary in l (runErr: why the audit failed).
// It runs even when ctx has ended (an interrupted audit is worth
// recording), for at most 10 seconds.
func recordSummary(ctx context.Context, l *ledger.Ledger, rep *Report, o Options, runErr error) error {
	sum := Summary{Bucket: rep.Bucket, By: o.By, Started: rep.Started, Seconds: rep.Seconds, DryRun: rep.DryRun,
		Listed: rep.Listed, Counts: rep.Counts, Resubmitted: rep.Resubmitted}
	if sum.By == "" {
		sum.By = whoAmI()
	}
	if len(o.Prefixes) > 1 || (len(o.Prefixes) == 1 && o.Prefixes[0] != "") {
		sum.Prefixes = o.Prefixes
	}
	if runErr != nil {
		sum.Error = runErr.Error()
	}
	var notable []Finding
	for _, f := range rep.Findings {
		if f.Class != TooYoung && f.Class != TooOld && f.Class != Current {
			notable = append(notable, f)
		}
	}
	sum.Findings = notable[:min(len(notable), SummaryFindings)]
	var b []byte
	for {
		sum.MoreFindings = len(notable) - len(sum.Findings)
		var err error
		if b, err = json.Marshal(&sum); err != nil {
			return fmt.Errorf("audit: the summary: %w", err)
		}
		if len(b) <= ledger.MaxNote || len(sum.Findings) == 0 {
			break
		}
		sum.Findings = sum.Findings[:len(sum.Findings)/2]
	}
	if len(sum.Error) > 0 && len(b) > ledger.MaxNote {
		sum.Error = sum.Error[:min(len(sum.Error), 4096)]
		b, _ = json.Marshal(&sum)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.PutNote(ctx, ledger.AuditNote, b); err != nil {
		return fmt.Errorf("audit: keeping the summary in the ledger: %w", err)
	}
	return nil
}
