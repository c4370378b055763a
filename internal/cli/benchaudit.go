package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

func benchAuditCmd(e *env) *cobra.Command {
	var storeURL string
	var objects int
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
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
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
			// Deferred first, so it runs last (after the ledger is closed),
			// with a context of its own: an interrupt cancels ctx, and the
			// objects must still go.
			defer func() {
				if err != nil && ctx.Err() != nil {
					err = fmt.Errorf("bench audit interrupted: %w", ctx.Err())
				}
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
				defer cancel()
				n, cerr := removeObjects(cctx, s, prefix)
				if cerr != nil {
					fmt.Fprintf(e.stderr, "cairn: bench audit: removed %d objects under %s but not all: %s; delete the rest with: cairn fs rm --store '%s' %s\n",
						n, safetext.Escape(prefix), oneLine(cerr.Error(), 200), safetext.URL(storeURL), safetext.Escape(prefix))
					if err == nil {
						err = fmt.Errorf("bench audit: removing its objects under %s: %w", prefix, cerr)
					}
					return
				}
				fmt.Fprintf(e.stderr, "removed the %d benchmark objects under %s\n", n, safetext.Escape(prefix))
			}()
			have := 0
			for _, err := range s.List(ctx, prefix, nil) {
				if err != nil {
					return err
				}
				have++
			}
			if have != objects {
				fmt.Fprintf(e.stderr, "writing %d objects under %s (removed at the end)…\n", objects, safetext.Escape(prefix))
				if _, err := removeObjects(ctx, s, prefix); err != nil {
					return err
				}
				if err := writeBenchObjects(ctx, s, prefix, objects); err != nil {
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
				rep, err = audit.Run(ctx, s, l, "bench", &audit.Options{Prefixes: []string{prefix}, Grace: time.Nanosecond, DryRun: true})
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

// removeObjects deletes every object under prefix and returns how many it
// deleted; the first error stops it (objects already gone are no error).
func removeObjects(ctx context.Context, s *objstore.Store, prefix string) (int, error) {
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for info, err := range s.List(gctx, prefix, nil) {
		if err != nil {
			g.Go(func() error { return err })
			break
		}
		g.Go(func() error {
			err := s.Delete(gctx, info.Key, objstore.Condition{})
			if err == nil {
				n.Add(1)
			}
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			return err
		})
	}
	err := g.Wait()
	return int(n.Load()), err
}

// writeBenchObjects writes n small objects under prefix (as bench fs does),
// stopping at the first error or when ctx ends.
func writeBenchObjects(ctx context.Context, s *objstore.Store, prefix string, n int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			_, err := s.PutBytes(gctx, fmt.Sprintf("%sd%03d/obj-%07d", prefix, i%100, i), fmt.Appendf(nil, "object %d", i), nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
