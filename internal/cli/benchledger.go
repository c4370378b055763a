package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/ledger"
)

func benchLedgerCmd(e *env) *cobra.Command {
	var url string
	var events, keys, naiveEvents, batch, workers, claims int
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Ledger decisions/s: batched cairn against the naive per-event table of seed 001",
		Long: `Generates --events events over --keys keys (overwrites with increasing
sequencers, 1% duplicates, 5% reordered) and records them into the ledger in
batches of --batch from --workers goroutines: decisions per second. The baseline
is seed 001's table done per event (SELECT, then INSERT or UPDATE, one
transaction each) on the same database kind, run on the first --naive-events
events of the same workload (a million single-event transactions would take
hours). Then claims and completes up to --claims records: claims+completions/s.
The ledger is wiped (table cairn_ledger) before the run: point it at a scratch
database.`,
		Example: `  cairn bench ledger --ledger /tmp/bench.db
  cairn bench ledger --ledger 'postgres://postgres@127.0.0.1:5432/bench' --workers 8 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if events < 1000 || keys < 1 || batch < 1 || workers < 1 {
				return usagef("--events >= 1000, --keys, --batch and --workers >= 1")
			}
			ctx := cmd.Context()
			l, err := openLedger(ctx, url)
			if err != nil {
				return err
			}
			defer l.Close()
			db, ok := l.(interface{ DB() *sql.DB })
			if !ok {
				return fmt.Errorf("bench ledger needs a SQL ledger (sqlite or postgres)")
			}
			isPG := strings.HasPrefix(url, "postgres")
			if _, err := db.DB().ExecContext(ctx, `DELETE FROM cairn_ledger`); err != nil {
				return err
			}
			evs := benchEvents(events, keys)
			naive, err := naiveLedger(ctx, db.DB(), isPG, evs[:min(naiveEvents, len(evs))])
			if err != nil {
				return fmt.Errorf("naive baseline: %w", err)
			}
			t0 := time.Now()
			if err := recordParallel(ctx, l, evs, batch, workers); err != nil {
				return err
			}
			cairnRate := float64(len(evs)) / time.Since(t0).Seconds()
			r1 := bench.NewResult("ledger/decisions", "events/s", naive, cairnRate)
			r1.BaselineDesc = fmt.Sprintf("per event: SELECT, INSERT or UPDATE, one transaction (%d events)", min(naiveEvents, len(evs)))
			r1.CairnDesc = fmt.Sprintf("Record in batches of %d from %d workers (%d events, %d keys)", batch, workers, len(evs), keys)
			claimRate, err := claimComplete(ctx, l, claims, workers)
			if err != nil {
				return err
			}
			r2 := bench.NewResult("ledger/claim+complete", "records/s", naive, claimRate)
			r2.BaselineDesc, r2.CairnDesc = "naive decisions/s (for scale)", fmt.Sprintf("Claim(100) + CompleteBatch, %d workers", workers)
			r2.Note = "the naive table has no claims at all; its decision rate is shown for scale"
			return bench.Print(e.stdout, e.json, []bench.Result{r2, r1})
		},
	}
	cmd.Flags().StringVar(&url, "ledger", "./cairn-data/bench-ledger.db", "ledger URL (scratch: it is wiped)")
	cmd.Flags().IntVar(&events, "events", 1_000_000, "events to record")
	cmd.Flags().IntVar(&keys, "keys", 100_000, "distinct keys")
	cmd.Flags().IntVar(&naiveEvents, "naive-events", 10_000, "events for the naive baseline")
	cmd.Flags().IntVar(&batch, "batch", 1000, "events per Record call")
	cmd.Flags().IntVar(&workers, "workers", 1, "concurrent recorders and claimers")
	cmd.Flags().IntVar(&claims, "claims", 20_000, "records to claim and complete")
	return cmd
}

// benchEvents: overwrites of random keys with per-key increasing sequencers,
// 1% duplicated later, 5% swapped with a nearby event.
func benchEvents(n, keys int) []event.Event {
	rng := rand.New(rand.NewPCG(1, 2))
	seq := make([]uint64, keys)
	evs := make([]event.Event, 0, n)
	for len(evs) < n {
		k := rng.IntN(keys)
		seq[k]++
		evs = append(evs, event.Event{Bucket: "bench", Key: fmt.Sprintf("data/%07d.json", k), Kind: event.Created,
			Name: "ObjectCreated:Put", Sequencer: fmt.Sprintf("%016X", seq[k]), ETag: fmt.Sprintf("%032x", seq[k]), Size: 100})
		if rng.IntN(100) == 0 && len(evs) < n {
			evs = append(evs, evs[len(evs)-1-rng.IntN(min(len(evs), 50))])
		}
	}
	for i := range evs {
		if rng.IntN(100) < 5 {
			j := min(len(evs)-1, i+1+rng.IntN(50))
			evs[i], evs[j] = evs[j], evs[i]
		}
	}
	return evs[:n]
}

func recordParallel(ctx context.Context, l ledger.Ledger, evs []event.Event, batch, workers int) error {
	next := make(chan []event.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range workers {
		wg.Go(func() {
			for b := range next {
				if _, err := l.Record(ctx, "bench", b); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < len(evs); i += batch {
		next <- evs[i:min(i+batch, len(evs))]
	}
	close(next)
	wg.Wait()
	return firstErr
}

func claimComplete(ctx context.Context, l ledger.Ledger, total, workers int) (float64, error) {
	var mu sync.Mutex
	done := 0
	var firstErr error
	t0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				stop := done >= total || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				cs, err := l.Claim(ctx, 100, time.Minute)
				if err == nil && len(cs) == 0 {
					return
				}
				if err == nil {
					var errs []error
					errs, err = l.CompleteBatch(ctx, cs, make([]string, len(cs)))
					for _, e := range errs {
						err = cmp(err, e)
					}
				}
				mu.Lock()
				done += len(cs)
				firstErr = cmp(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return float64(done) / time.Since(t0).Seconds(), firstErr
}

// naiveLedger is seed 001's processed-keys table, one transaction per event.
func naiveLedger(ctx context.Context, db *sql.DB, pg bool, evs []event.Event) (float64, error) {
	ph := func(q string) string {
		if !pg {
			return q
		}
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
		return q
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS naive_processed (k TEXT PRIMARY KEY, seq TEXT NOT NULL, state TEXT NOT NULL)`); err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM naive_processed`); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for _, ev := range evs {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		var seq, state string
		err = tx.QueryRowContext(ctx, ph(`SELECT seq, state FROM naive_processed WHERE k = ?`), ev.Bucket+"/"+ev.Key).Scan(&seq, &state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, ph(`INSERT INTO naive_processed (k, seq, state) VALUES (?, ?, 'PROCESSING')`), ev.Bucket+"/"+ev.Key, ev.Sequencer)
		case err == nil && event.CompareSequencer(ev.Sequencer, seq) > 0:
			_, err = tx.ExecContext(ctx, ph(`UPDATE naive_processed SET seq = ?, state = 'PROCESSING' WHERE k = ?`), ev.Sequencer, ev.Bucket+"/"+ev.Key)
		}
		if err != nil {
			tx.Rollback()
			return 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	rate := float64(len(evs)) / time.Since(t0).Seconds()
	_, _ = db.ExecContext(ctx, `DROP TABLE naive_processed`)
	return rate, nil
}
