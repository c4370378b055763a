package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	// Ledger backends, linked in for their URL schemes.
	_ "github.com/cairn-s3/cairn/ledger/dynamoledger" // dynamodb://
	_ "github.com/cairn-s3/cairn/ledger/objledger"    // s3://, file://
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	_ "github.com/cairn-s3/cairn/ledger/sqlite"
)

// openExistingLedger opens the ledger at url for a command that reads it or
// changes the records it holds: it never creates one (ledger.Options.MustExist)
// and says how to get one when there is none.
func openExistingLedger(ctx context.Context, url string) (*ledger.Ledger, error) {
	l, err := ledger.Open(ctx, url, &ledger.Options{MustExist: true})
	if errors.Is(err, ledger.ErrNoLedger) {
		return nil, noLedgerError{url: url, err: err}
	}
	return l, err
}

// noLedgerError: there is no ledger at url.
type noLedgerError struct {
	url string
	err error
}

func (e noLedgerError) Error() string {
	shown := e.url
	if shown == "" {
		shown = ledger.DefaultURL
	}
	if !strings.Contains(shown, "://") && !filepath.IsAbs(shown) && !strings.HasPrefix(shown, ".") {
		shown = "./" + shown
	}
	return fmt.Sprintf("no ledger at %s: run cairn serve (or pass --ledger URL) first", safetext.URL(shown))
}

func (e noLedgerError) Unwrap() error { return e.err }

func ledgerCmd(e *env) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Inspect the intake ledger (what was received, decided, processed, failed)",
		Long: `The intake ledger records every object-change event, decides whether it is new
work, a duplicate or stale, and tracks the work through claims, retries and dead
letters. --ledger takes sqlite:///path.db, a plain path (SQLite), postgres://…,
or an object store (s3://bucket/prefix?…, file:///dir: the ledger kept in the
store itself, no database), or a DynamoDB table (dynamodb://TABLE?region=…);
default ./cairn-data/ledger.db.`,
	}
	nonEmptyVar(cmd.PersistentFlags(), &url, "ledger", ledger.DefaultURL, "ledger URL", "drop --ledger for the default ("+ledger.DefaultURL+")")
	var status, prefix, bucket string
	var limit int
	var all bool
	ls := &cobra.Command{
		Use:   "ls [--status S] [--prefix P] [--bucket B] [--limit N | --all] [--json]",
		Short: "List records",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("--limit %d: give a number of records, or 0 (or --all) for every record", limit)
			}
			switch ledger.Status(status) {
			case "", ledger.Pending, ledger.Claimed, ledger.Processed, ledger.Failed, ledger.Dead:
			default:
				return usagef("--status %q: use pending, claimed, processed, failed or dead", status)
			}
			l, err := openExistingLedger(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer l.Close()
			if all {
				limit = 0
			}
			f := ledger.Filter{Status: ledger.Status(status), Prefix: prefix, Bucket: bucket}
			var tab *textTable
			if !e.json {
				tab = &textTable{}
				tab.add("BUCKET", "KEY", "STATUS", "SEQUENCER", "ATTEMPTS", "SEEN", "UPDATED", "LAST ERROR")
			}
			// Pages of at most 1,000, each written as it comes: with
			// --limit 0 the whole ledger streams through in bounded memory.
			shown := 0
			for limit == 0 || shown < limit {
				f.Limit = lsPage
				if limit > 0 {
					f.Limit = min(limit-shown, lsPage)
				}
				page, err := l.List(cmd.Context(), f)
				if err != nil {
					return err
				}
				if len(page) == 0 {
					break
				}
				for _, r := range page {
					if e.json {
						if err := e.writeJSON(r.Record); err != nil {
							return err
						}
					} else {
						tab.add(capCell(safetext.Escape(r.Bucket), 40), capCell(safetext.Escape(r.Key), 80), safetext.Escape(string(r.Status)),
							capCell(safetext.Escape(r.Seq), 24), fmt.Sprint(r.Attempts), fmt.Sprint(r.Seen), r.Updated.Format(time.RFC3339),
							capCell(safetext.Escape(oneLine(r.LastError, 60)), 60))
					}
					shown++
				}
				if tab != nil {
					if err := tab.write(e.stdout); err != nil {
						return err
					}
				}
				f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
			}
			if limit > 0 && shown == limit {
				// Cut: say so, and how to see the rest, if anything is left.
				f.Limit = 1
				more, err := l.List(cmd.Context(), f)
				if err != nil {
					return err
				}
				if len(more) > 0 {
					fmt.Fprintf(e.stderr, "cairn: listed the first %d records; more match: --all (or --limit 0) lists every one, --json as JSON lines\n", shown)
				}
			}
			return nil
		},
	}
	nonEmptyVar(ls.Flags(), &status, "status", "", "only records with this status", "an empty filter would list every status; drop --status to mean that")
	nonEmptyVar(ls.Flags(), &prefix, "prefix", "", "only keys with this prefix", "an empty filter would list every key; drop --prefix to mean that")
	nonEmptyVar(ls.Flags(), &bucket, "bucket", "", "only this bucket", "an empty filter would list every bucket; drop --bucket to mean that")
	ls.Flags().IntVar(&limit, "limit", 1000, "at most this many records (0: all); when records are left out, a line on stderr says so")
	ls.Flags().BoolVar(&all, "all", false, "list every record (as --limit 0), streamed; text columns are cut, --json has every value whole")
	show := &cobra.Command{
		Use:   "show BUCKET/KEY",
		Short: "Show everything the ledger knows about one key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, ok := strings.Cut(args[0], "/")
			if !ok || bucket == "" || key == "" {
				return usagef("%q: give BUCKET/KEY", args[0])
			}
			l, err := openExistingLedger(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer l.Close()
			rs, err := l.Get(cmd.Context(), bucket, key)
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("the ledger holds no record of %s/%s: check the bucket and the key (cairn ledger ls --bucket %s --prefix KEY_PREFIX lists the keys it holds; a purged record is gone): %w",
					safetext.Escape(bucket), safetext.Escape(key), safetext.Escape(bucket), err)
			}
			if err != nil {
				return err
			}
			for _, r := range rs {
				if e.json {
					if err := e.writeJSON(r); err != nil {
						return err
					}
					continue
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				for _, kv := range [][2]string{{"bucket", r.Bucket}, {"key", r.Key}, {"version", r.VersionID}, {"etag", r.ETag},
					{"size", fmt.Sprint(r.Size)}, {"kind", string(r.Kind)}, {"event", r.Name}, {"sequencer", r.Seq},
					{"status", string(r.Status)}, {"attempts", fmt.Sprint(r.Attempts)}, {"token", fmt.Sprint(r.Token)},
					{"lease until", fmtTime(r.LeaseUntil)}, {"next attempt", nextAttempt(r)}, {"first seen", fmtTime(r.FirstSeen)},
					{"updated", fmtTime(r.Updated)}, {"seen", fmt.Sprint(r.Seen)}, {"stale", fmt.Sprint(r.Stale)}, {"replays", fmt.Sprint(r.Replays)},
					{"source", r.Source}, {"last error", r.LastError}, {"result", r.Result}} {
					fmt.Fprintf(tw, "%s:\t%s\n", kv[0], safetext.Escape(kv[1]))
				}
				tw.Flush()
				fmt.Fprintln(e.stdout)
			}
			return nil
		},
	}
	cmd.AddCommand(ls, show, purgeCmd(e, &url))
	return cmd
}

// nextAttempt is when the record's work is retried: only a failed record, or
// a pending one that failed before (its retry waits out the backoff), has a
// retry scheduled. The ledger keeps a time for the others too (when pending
// work arrived, when it was finished), which is no attempt.
func nextAttempt(r ledger.Record) string {
	if r.Status == ledger.Failed || (r.Status == ledger.Pending && r.Attempts > 0) {
		return fmtTime(r.NextAttempt)
	}
	return "-"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

// lsPage is how many records ledger ls reads at a time.
const lsPage = 1000

// capCell cuts an escaped cell to at most n display cells, ending with … when
// cut, so that one long key does not widen every row (--json has the whole).
func capCell(s string, n int) string {
	if displayWidth(s) <= n {
		return s
	}
	w := 0
	for i, r := range s {
		rw := displayWidth(string(r))
		if w+rw > n-1 {
			return s[:i] + "…"
		}
		w += rw
	}
	return s
}

// oneLine is s on one line, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if utf8.RuneCountInString(s) > n {
		return string([]rune(s)[:n-1]) + "…"
	}
	return s
}

// escapeAll is keys as they may be shown (safetext.Escape).
func escapeAll(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = safetext.Escape(k)
	}
	return out
}
