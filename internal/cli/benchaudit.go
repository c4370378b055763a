package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
)

func benchAuditCmd(e *env) *cobra.Command {
	var storeURL string
	var objects int
	cmd := &cobra.Command{
		Use:   "audit --store URL [--objects N]",
		Short: "Audit time against a bare LIST of the same prefix, with a ledger holding every object",
		Long: `Writes --objects small objects under cairn-bench-audit/ (skipped if they are
already there from an earlier run), records them in a fresh SQLite ledger as
processed, then times a bare LIST of the prefix and a dry-run audit of it, and
reports the ratio and the audit's peak Go heap.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeURL == "" || objects < 1 {
				return usagef("--store and --objects >= 1 are required")
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			prefix := fmt.Sprintf("cairn-bench-audit/%d/", objects)
			have := 0
			for _, err := range s.List(ctx, prefix, nil) {
				if err != nil {
					return err
				}
				have++
			}
			if have != objects {
				fmt.Fprintf(e.stderr, "writing %d objects…\n", objects)
				cleanupPrefix(ctx, s, prefix)
				if err := writeObjects(ctx, s, prefix, objects); err != nil {
					return err
				}
			}
			tmp, err := os.MkdirTemp("", "cairn-bench-audit-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			l, err := ledger.Open(ctx, filepath.Join(tmp, "ledger.db"), nil)
			if err != nil {
				return err
			}
			defer l.Close()
			// The ledger holds every object, processed.
			var batch []event.Event
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				if _, err := l.Record(ctx, "bench", batch); err != nil {
					return err
				}
				batch = batch[:0]
				for {
					cs, err := l.Claim(ctx, 5000, time.Hour)
					if err != nil || len(cs) == 0 {
						return err
					}
					if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
						return err
					}
				}
			}
			for info, err := range s.List(ctx, prefix, nil) {
				if err != nil {
					return err
				}
				batch = append(batch, event.Event{Bucket: "bench", Key: info.Key, ETag: info.ETag, Size: info.Size, Sequencer: "01", Kind: event.Created})
				if len(batch) == 10000 {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if err := flush(); err != nil {
				return err
			}
			start := time.Now()
			n := 0
			for _, err := range s.List(ctx, prefix, nil) {
				if err != nil {
					return err
				}
				n++
			}
			bare := time.Since(start)
			var rep *audit.Report
			start = time.Now()
			peak, err := peakHeap(func() error {
				var err error
				rep, err = audit.Run(ctx, audit.Options{Store: s, Ledger: l, Bucket: "bench", Prefixes: []string{prefix}, Grace: time.Nanosecond, DryRun: true})
				return err
			})
			if err != nil {
				return err
			}
			took := time.Since(start)
			if rep.Listed != int64(n) || rep.Counts[audit.Missing]+rep.Counts[audit.Changed]+rep.Counts[audit.Gone] != 0 {
				return fmt.Errorf("audit listed %d of %d objects with findings %v: the bench's ledger is wrong", rep.Listed, n, rep.Counts)
			}
			r := bench.NewResult(fmt.Sprintf("audit of %d objects on %s (ledger holding them) vs a bare LIST", n, safetext.URL(storeURL)), "seconds",
				bare.Seconds(), took.Seconds())
			r.Lower = true
			r.BaselineDesc, r.CairnDesc = "bare LIST", "cairn audit (LIST + ledger lookups + the ledger walk for gone objects)"
			r.Note = fmt.Sprintf("audit peak Go heap %.1f MiB", float64(peak)/(1<<20))
			return bench.Print(e.stdout, e.json, []bench.Result{r})
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "store URL")
	cmd.Flags().IntVar(&objects, "objects", 100000, "objects to audit")
	return cmd
}
