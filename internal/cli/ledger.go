package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	// Ledger backends, linked in for their URL schemes.
	_ "github.com/cairn-s3/cairn/ledger/objledger" // s3://, file://
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	_ "github.com/cairn-s3/cairn/ledger/sqlite"
)

func openLedger(ctx context.Context, url string) (ledger.Ledger, error) {
	return ledger.Open(ctx, url, nil)
}

func ledgerCmd(e *env) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Inspect the intake ledger (what was received, decided, processed, failed)",
		Long: `The intake ledger records every object-change event, decides whether it is new
work, a duplicate or stale, and tracks the work through claims, retries and dead
letters. --ledger takes sqlite:///path.db, a plain path (SQLite), postgres://…,
or an object store (s3://bucket/prefix?…, file:///dir: the ledger kept in the
store itself, no database);
default ./cairn-data/ledger.db.`,
	}
	cmd.PersistentFlags().StringVar(&url, "ledger", ledger.DefaultURL, "ledger URL")
	var status, prefix, bucket string
	var limit int
	ls := &cobra.Command{
		Use:   "ls [--status S] [--prefix P] [--bucket B]",
		Short: "List records",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch ledger.Status(status) {
			case "", ledger.Pending, ledger.Claimed, ledger.Processed, ledger.Failed, ledger.Dead:
			default:
				return usagef("--status %q: use pending, claimed, processed, failed or dead", status)
			}
			l, err := openLedger(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer l.Close()
			f := ledger.Filter{Status: ledger.Status(status), Prefix: prefix, Bucket: bucket, Limit: min(limit, 1000)}
			var tw *tabwriter.Writer
			if !e.json {
				tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "BUCKET\tKEY\tSTATUS\tSEQUENCER\tATTEMPTS\tSEEN\tUPDATED\tLAST ERROR")
			}
			shown := 0
			for shown < limit {
				page, err := l.List(cmd.Context(), f)
				if err != nil {
					return err
				}
				for _, r := range page {
					if e.json {
						if err := e.writeJSON(r.Record); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", safetext.Escape(r.Bucket), safetext.Escape(r.Key),
							safetext.Escape(string(r.Status)), safetext.Escape(r.Seq), r.Attempts, r.Seen,
							r.Updated.Format(time.RFC3339), safetext.Escape(oneLine(r.LastError, 60)))
					}
					shown++
				}
				if len(page) < f.Limit {
					break
				}
				f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
			}
			if tw != nil {
				return tw.Flush()
			}
			return nil
		},
	}
	ls.Flags().StringVar(&status, "status", "", "only records with this status")
	ls.Flags().StringVar(&prefix, "prefix", "", "only keys with this prefix")
	ls.Flags().StringVar(&bucket, "bucket", "", "only this bucket")
	ls.Flags().IntVar(&limit, "limit", 1000, "at most this many records")
	show := &cobra.Command{
		Use:   "show BUCKET/KEY",
		Short: "Show everything the ledger knows about one key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bucket, key, ok := strings.Cut(args[0], "/")
			if !ok || bucket == "" || key == "" {
				return usagef("%q: give BUCKET/KEY", args[0])
			}
			l, err := openLedger(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer l.Close()
			rs, err := l.Get(cmd.Context(), bucket, key)
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
					{"lease until", fmtTime(r.LeaseUntil)}, {"next attempt", fmtTime(r.NextAttempt)}, {"first seen", fmtTime(r.FirstSeen)},
					{"updated", fmtTime(r.Updated)}, {"seen", fmt.Sprint(r.Seen)}, {"stale", fmt.Sprint(r.Stale)},
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

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
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
