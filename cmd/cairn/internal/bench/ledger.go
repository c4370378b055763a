package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	// Ledger backends, linked in for their URL schemes.
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	_ "github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/metrics"
)

// LedgerOptions configures Ledger. Zero fields take the defaults.
type LedgerOptions struct {
	// URLs are the ledgers measured, in turn (default
	// ./cairn-data/bench-ledger.db). Each is wiped first (table cairn_ledger,
	// or every object under an object-store ledger's prefix): scratch only.
	URLs []string
	// Events is how many events are recorded (default 1,000,000) over Keys
	// distinct keys (default 100,000).
	Events, Keys int
	// NaiveEvents is how many of them the naive baseline records (default
	// 10,000; at most 2,000 on an object store).
	NaiveEvents int
	// Batch is events per Record call (default 1000).
	Batch int
	// Workers is concurrent recorders and claimers (default 1).
	Workers int
	// Claims is how many records are claimed and completed (default 20,000).
	Claims int
}

// Ledger generates Events events over Keys keys (overwrites with increasing
// sequencers, 1% duplicates, 5% reordered), records them into each ledger in
// batches from Workers goroutines, then claims and completes up to Claims
// records, against a naive per-event ledger on the same kind of storage: on
// SQLite and PostgreSQL, one transaction per event (SELECT, then INSERT or
// UPDATE); on an object store, one marker object per key (GET, PUT if newer).
// For object stores it also counts requests per 1,000 events.
func Ledger(ctx context.Context, opts LedgerOptions) ([]Result, error) {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.Events, 1_000_000)
	def(&opts.Keys, 100_000)
	def(&opts.NaiveEvents, 10_000)
	def(&opts.Batch, 1000)
	def(&opts.Workers, 1)
	def(&opts.Claims, 20_000)
	urls := opts.URLs
	if len(urls) == 0 {
		urls = []string{"./cairn-data/bench-ledger.db"}
	}
	evs := benchEvents(opts.Events, opts.Keys)
	var results []Result
	for _, url := range urls {
		rs, err := benchOneLedger(ctx, url, evs, opts.Keys, opts.NaiveEvents, opts.Batch, opts.Workers, opts.Claims)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", safetext.URL(url), err)
		}
		results = append(results, rs...)
	}
	return results, nil
}

// benchOneLedger wipes the ledger at url, runs the naive baseline and cairn on
// evs, and returns the results named after the backend.
func benchOneLedger(ctx context.Context, url string, evs []event.Event, keys, naiveEvents, batch, workers, claims int) ([]Result, error) {
	if isDynamoLedger(url) {
		return benchDynamoLedger(ctx, url, evs, keys, naiveEvents, batch, workers)
	}
	var l *ledger.Ledger
	var naive, perK float64
	var naiveDesc, kind string
	var requests func() float64
	if isObjectLedger(url) {
		kind = "object store"
		ol, count, err := openCountedObjLedger(ctx, url)
		if err != nil {
			return nil, err
		}
		l, requests = ledger.New(ol), count
		n := min(naiveEvents, 2000, len(evs))
		naive, perK, err = naiveObjectLedger(ctx, ol.Store(), evs[:n])
		if err != nil {
			return nil, fmt.Errorf("naive baseline: %w", err)
		}
		naiveDesc = fmt.Sprintf("per event: GET the key's marker object, PUT it if newer (%d events)", n)
	} else {
		var err error
		if l, err = ledger.Open(ctx, url, nil); err != nil {
			return nil, err
		}
		db, ok := l.Backend().(interface{ DB() *sql.DB }) // SQL ledgers only
		if !ok {
			l.Close()
			return nil, fmt.Errorf("bench ledger needs a SQL ledger (sqlite or postgres), an object-store ledger (s3://, file://) or a DynamoDB one (dynamodb://)")
		}
		isPG := strings.HasPrefix(url, "postgres")
		kind = "sqlite"
		if isPG {
			kind = "postgres"
		}
		if _, err := db.DB().ExecContext(ctx, `DELETE FROM cairn_ledger`); err != nil {
			l.Close()
			return nil, err
		}
		n := min(naiveEvents, len(evs))
		if naive, err = naiveLedger(ctx, db.DB(), isPG, evs[:n]); err != nil {
			l.Close()
			return nil, fmt.Errorf("naive baseline: %w", err)
		}
		naiveDesc = fmt.Sprintf("per event: SELECT, INSERT or UPDATE, one transaction (%d events)", n)
	}
	defer l.Close()
	var before float64
	if requests != nil {
		before = requests()
	}
	t0 := time.Now()
	if err := recordParallel(ctx, l, evs, batch, workers); err != nil {
		return nil, err
	}
	// The clock stops once every decision is in the ledger's tables: Counts
	// reads them, so on SQLite it first folds the intake log.
	if _, err := l.Counts(ctx); err != nil {
		return nil, err
	}
	cairnRate := float64(len(evs)) / time.Since(t0).Seconds()
	r1 := NewResult("ledger/decisions ["+kind+"]", "events/s", naive, cairnRate)
	r1.BaselineDesc = naiveDesc
	r1.CairnDesc = fmt.Sprintf("Record in batches of %d from %d workers (%d events, %d keys)", batch, workers, len(evs), keys)
	out := []Result{r1}
	if requests != nil {
		r := NewResult("ledger/requests per 1,000 events ["+kind+"]", "requests", perK, (requests()-before)*1000/float64(len(evs)))
		r.BaselineDesc, r.CairnDesc, r.Lower = "naive: one marker object per key", "sharded heads, group-committed CAS", true
		out = append(out, r)
	}
	claimRate, err := claimComplete(ctx, l, claims, workers)
	if err != nil {
		return nil, err
	}
	r2 := NewResult("ledger/claim+complete ["+kind+"]", "records/s", naive, claimRate)
	r2.BaselineDesc, r2.CairnDesc = "naive decisions/s (for scale)", fmt.Sprintf("Claim(100) + CompleteBatch, %d workers", workers)
	r2.Note = "the naive ledger has no claims at all; its decision rate is shown for scale"
	return append(out, r2), nil
}

// isObjectLedger: the URL names a store rather than a database.
func isObjectLedger(url string) bool {
	scheme, _, ok := strings.Cut(url, "://")
	return ok && (scheme == "s3" || scheme == "file" || scheme == "mem")
}

// openCountedObjLedger wipes and opens the object-store ledger at url with
// its requests counted.
func openCountedObjLedger(ctx context.Context, url string) (*objledger.Backend, func() float64, error) {
	storeURL, cfg, err := objledger.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	s, err := objstore.Open(ctx, storeURL, nil)
	if err != nil {
		return nil, nil, err
	}
	infos, err := s.ListAll(ctx, "", nil)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	keys := make([]string, len(infos))
	for i, in := range infos {
		keys[i] = in.Key
	}
	if failed, err := s.DeleteMany(ctx, keys, 16); err != nil || len(failed) > 0 {
		s.Close()
		return nil, nil, fmt.Errorf("wiping the scratch ledger: %v %v", err, failed)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	counted := objstore.New(m.Wrap(s.Backend(), "ledger"), nil)
	l, err := objledger.OpenBackend(ctx, counted, nil, &cfg)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	count := func() float64 {
		var n float64
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "cairn_objstore_requests_total" {
				for _, c := range mf.GetMetric() {
					n += c.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	return l, count, nil
}

// naiveObjectLedger is the obvious ledger on an object store: one marker
// object per key holding the newest sequencer, read and rewritten per event
// without conditions (concurrent deliverers can lose updates: it is the
// baseline, not a design). It returns events/s and requests per 1,000 events.
func naiveObjectLedger(ctx context.Context, s *objstore.Store, evs []event.Event) (float64, float64, error) {
	requests := 0
	t0 := time.Now()
	for _, ev := range evs {
		key := "naive-bench/" + ev.Bucket + "/" + ev.Key
		data, _, err := s.GetBytes(ctx, key)
		requests++
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return 0, 0, err
		}
		if err == nil && event.CompareSequencer(ev.Sequencer, string(data)) <= 0 {
			continue
		}
		if _, err := s.PutBytes(ctx, key, []byte(ev.Sequencer), nil); err != nil {
			return 0, 0, err
		}
		requests++
	}
	rate := float64(len(evs)) / time.Since(t0).Seconds()
	if infos, err := s.ListAll(ctx, "naive-bench/", nil); err == nil {
		keys := make([]string, len(infos))
		for i, in := range infos {
			keys[i] = in.Key
		}
		_, _ = s.DeleteMany(ctx, keys, 16)
	}
	return rate, float64(requests) * 1000 / float64(len(evs)), nil
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

func recordParallel(ctx context.Context, l *ledger.Ledger, evs []event.Event, batch, workers int) error {
	next := make(chan []event.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for b := range next {
				if _, err := l.Record(ctx, "bench", b); err != nil {
					mu.Lock()
					first = firstErr(first, err)
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
	return first
}

func claimComplete(ctx context.Context, l *ledger.Ledger, total, workers int) (float64, error) {
	var mu sync.Mutex
	done := 0
	var first error
	t0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				stop := done >= total || first != nil
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
						err = firstErr(err, e)
					}
				}
				mu.Lock()
				done += len(cs)
				first = firstErr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A read sees every claim and completion: on SQLite it first folds the
	// intake log into the table, which is part of their cost.
	if _, err := l.Lookup(ctx, "", []string{""}); err != nil {
		first = firstErr(first, err)
	}
	return float64(done) / time.Since(t0).Seconds(), first
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
