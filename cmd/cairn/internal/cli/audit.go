package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

func auditCmd(e *env) *cobra.Command {
	var o audit.Options
	var storeURL, ledgerURL, bucket, inventory string
	var processOwn bool
	cmd := &cobra.Command{
		Use:   "audit (--store URL | --inventory MANIFEST-URL) [--ledger URL] [--prefix P]… [--grace 15m] [--dry-run]",
		Short: "Find the object changes notifications never announced (LIST against the ledger) and resubmit them",
		Long: `cairn audit lists the bucket (streamed, page by page), looks each page up in the
ledger, and classifies every object: current; missing (no record: its event was
lost); changed (the record's ETag differs: an overwrite whose event was lost);
failed or dead (reported; resubmitted with --resubmit-failed); gone (a record
whose object no longer exists: deleted without a removal event); too young
(modified within --grace, its event may still be coming); too old (missing but
older than --horizon, the ledger's retention: never resubmitted).

Every audit, a dry run included, leaves its summary in the ledger (when, who:
host/pid, dry run or not, what it found, why it stopped if it failed), where
the status page of any 'cairn serve' on that ledger shows it as the last audit.

For buckets too big to LIST, --inventory s3://inventory-bucket/…/manifest.json
reads the objects from an S3 Inventory report (CSV) instead; gone objects are
then not looked for.

Missing, changed and gone objects are resubmitted into the ledger as events
without a sequencer (source "audit"), named for the reason: cairn:Audit:Missing,
cairn:Audit:Changed, cairn:Audit:Gone (and cairn:Audit:Failed, cairn:Audit:Dead
with --resubmit-failed). A running 'cairn serve' on the same ledger processes
them: its handler sees CAIRN_EVENT created (removed for Gone), that
CAIRN_EVENT_NAME, and an empty CAIRN_SEQUENCER. The ledger never lets such an
event override a newer real one, and a late real event for the same state is a
duplicate.

--grace 0 judges every object however young. A dry run reports as
"would resubmit" exactly what a real run would resubmit.

Exit status 0 whether or not something was found (the report says); 1 on error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if o.Grace < 0 {
				return usagef("--grace must not be negative (0: judge every object however young)")
			}
			var store *objstore.Store
			if inventory != "" {
				if storeURL != "" {
					return usagef("give --store or --inventory, not both")
				}
				s, key, err := objstore.OpenObject(ctx, inventory, nil)
				if err != nil {
					return usageError{err}
				}
				defer s.Close()
				src, objs, err := audit.Inventory(ctx, s, key)
				if err != nil {
					return err
				}
				if bucket == "" {
					bucket = src
				}
				store, o.Objects = s, objs
				storeURL = inventory
			} else if storeURL == "" {
				return usagef("--store URL is required (the bucket to audit), or --inventory URL")
			}
			if bucket == "" {
				if u, err := objstore.ParseURL(storeURL); err == nil && u.Scheme == "s3" {
					bucket = u.Host
				} else {
					return usagef("--bucket NAME is required when --store is not an s3:// URL (the bucket name events carry)")
				}
			}
			if store == nil {
				s, err := openStore(ctx, storeURL)
				if err != nil {
					return err
				}
				defer s.Close()
				store = s
			}
			// A dry run only reads the ledger: it never creates one.
			var l *ledger.Ledger
			var err error
			if o.DryRun {
				l, err = openExistingLedger(ctx, ledgerURL)
			} else {
				l, err = ledger.Open(ctx, ledgerURL, nil)
			}
			if err != nil {
				return err
			}
			defer l.Close()
			var mu sync.Mutex
			last := time.Time{}
			if !e.json && isTerminal(e.stderr) {
				o.Progress = func(n int64) {
					mu.Lock()
					defer mu.Unlock()
					if time.Since(last) > 100*time.Millisecond {
						last = time.Now()
						fmt.Fprintf(e.stderr, "\r\033[Klisted %d objects", n)
					}
				}
			}
			o.Skip = ownSkipper(ledgerURL, storeURL, bucket, processOwn)
			rep, err := audit.Run(ctx, store, l, bucket, &o)
			if o.Progress != nil {
				fmt.Fprint(e.stderr, "\r\033[K")
			}
			if err != nil {
				return err
			}
			if rep.SummaryError != "" {
				fmt.Fprintf(e.stderr, "warning: the audit's summary was not kept in the ledger, so the status page shows an older one: %s\n", rep.SummaryError)
			}
			if e.json {
				if o.DryRun {
					return e.writeJSON(dryRunReport(rep))
				}
				return e.writeJSON(rep)
			}
			verb := "resubmitted"
			if o.DryRun {
				verb = "would resubmit (dry run)"
			}
			fmt.Fprintf(e.stdout, "audit of %s: %d objects listed in %.2fs; %s %d\n", safetext.URL(storeURL), rep.Listed, rep.Seconds, verb, rep.Resubmitted)
			classes := make([]string, 0, len(rep.Counts))
			for c := range rep.Counts {
				classes = append(classes, c)
			}
			sort.Strings(classes)
			for _, c := range classes {
				fmt.Fprintf(e.stdout, "  %-10s %d\n", c, rep.Counts[c])
			}
			// Too young objects are many after a busy quarter of an hour and
			// nothing to act on: a count, not rows.
			var findings []audit.Finding
			for _, f := range rep.Findings {
				if f.Class != audit.TooYoung {
					findings = append(findings, f)
				}
			}
			if n := rep.Counts[audit.TooYoung]; n > 0 {
				fmt.Fprintf(e.stdout, "%d %s modified within the last %s not judged yet (their events may still be on the way): not listed; the next audit judges them, --json lists them\n",
					n, map[bool]string{true: "object", false: "objects"}[n == 1], o.Grace)
			}
			if len(findings) > 0 {
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "\nCLASS\tKEY\tOBJECT ETAG\tLEDGER ETAG\tSTATUS")
				for i, f := range findings {
					if i == 50 {
						fmt.Fprintf(tw, "…\t%d more (--json lists up to 1,000)\t\t\t\n", len(findings)-50)
						break
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safetext.Escape(f.Class), safetext.Escape(f.Key), safetext.Escape(f.ETag),
						safetext.Escape(f.LedgerETag), safetext.Escape(string(f.Status)))
				}
				tw.Flush()
			}
			return nil
		},
	}
	fs := cmd.Flags()
	nonEmptyVar(fs, &storeURL, "store", "", "the bucket (store URL) to audit", "name the store to audit")
	nonEmptyVar(fs, &ledgerURL, "ledger", ledger.DefaultURL, "ledger URL", "drop --ledger for the default ("+ledger.DefaultURL+")")
	nonEmptyVar(fs, &inventory, "inventory", "", "read the objects from an S3 Inventory report (CSV) instead of LISTing: the URL of its manifest.json", "name the manifest.json, or drop --inventory to LIST")
	nonEmptyVar(fs, &bucket, "bucket", "", "bucket name the events carry (default: the s3:// URL's bucket)", "name the bucket, or drop --bucket")
	nonEmptyArrayVar(fs, &o.Prefixes, "prefix", "audit only keys under this prefix (repeatable)", "an empty prefix would audit the whole bucket; drop --prefix to mean that")
	durflag.Var(fs, &o.Grace, "grace", audit.DefaultGrace, "skip objects modified more recently (their events may still be coming); 0: none")
	durflag.Var(fs, &o.Horizon, "horizon", 30*24*time.Hour, "skip missing objects older than this (the ledger's retention)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "report only; resubmit nothing")
	fs.BoolVar(&processOwn, "process-own-objects", false, "judge cairn's own objects too, which are skipped by default as serve skips their events: keys under cairn-probe/, cairn-locks/, cairn-journal/, cairn-ledger/ at the bucket's root (and under an s3:// --store's prefix), and an s3:// --ledger's own prefix")
	fs.BoolVar(&o.ResubmitFailed, "resubmit-failed", false, "also resubmit failed and dead records")
	fs.IntVar(&o.Parallel, "parallel-prefixes", 1, "list this many top-level folders at once")
	return cmd
}

// dryRunReport is a dry run's report as JSON: what a real run would have
// resubmitted is "would_resubmit", never "resubmitted" (nothing was).
func dryRunReport(rep *audit.Report) any {
	b, err := json.Marshal(rep)
	if err != nil {
		return rep
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return rep
	}
	m["would_resubmit"] = m["resubmitted"]
	delete(m, "resubmitted")
	delete(m, "decisions")
	return m
}
