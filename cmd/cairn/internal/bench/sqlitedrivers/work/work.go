// Package work holds the workloads that sqlitedrivers runs on each SQLite
// driver: one driver per binary (each cmd/ and wazero/ is a main package that
// links one driver and calls Main), one workload per process, on a fresh file
// with the pragmas of cairn's SQLite ledger (ledger/sqlite/sqlite.go). It
// imports no driver, and of cairn only the ledger's schema and SQL text
// (internal/sqlschema, standard library only), so each driver's binary holds
// that driver alone.
package work

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-s3/cairn/internal/sqlschema"
)

// Result is what one workload run prints (one JSON line on stdout).
type Result struct {
	Driver   string  `json:"driver"`
	SQLite   string  `json:"sqlite"`
	Workload string  `json:"workload"`
	Unit     string  `json:"unit"` // what Rows counts
	Rows     int     `json:"rows"` // events, rows or blobs done
	Secs     float64 `json:"secs"` // wall time of the timed part
	Rate     float64 `json:"rate"` // Rows / Secs
	Txs      int     `json:"txs"`  // transactions committed in the timed part
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"` // per transaction
	// Phases splits the timed part (seconds): where a transaction's time
	// goes (statements vs commit, i.e. CPU in the driver vs fsync).
	Phases map[string]float64 `json:"phases,omitempty"`
	OpenMS float64            `json:"open_ms"` // sql.Open + first statement (wazero compiles here)
	// CPUSecs is the CPU time (user + system, all threads) of the timed
	// part: the driver's cost per row, less disturbed than the wall time by
	// other processes on a shared machine.
	CPUSecs float64 `json:"cpu_secs"`
	// Writes are the row writes the workload made (record: one a distinct
	// key a batch), which verify checks against the file.
	Writes int `json:"writes,omitempty"`
}

// The ledger's schema and SQL, from cairn's own source (package sqlschema,
// which ledger/sqlite and sqlledger use): its migrations in order, its
// columns in the order sqlledger writes them (rev follows: nCols values a
// row), the guarded upsert (%s: the row source) and its conflict clause.
var migrations = append(slices.Clip(sqlschema.SQLiteMigrations), sqlschema.ErrorClassColumn)

const (
	cols          = sqlschema.Cols
	upsertFrom    = sqlschema.UpsertFrom
	upsertHead    = sqlschema.UpsertHead
	onConflictSet = sqlschema.OnConflictSet
)

var nCols = len(sqlschema.ColTypes)

// upsertSizes are sqlledger's prepared multi-row upserts (SQLite dialect).
var upsertSizes = sqlschema.UpsertSizes

// valuesFrom is sqlledger's row source over n rows of placeholders.
func valuesFrom(n int) string {
	from, _ := sqlschema.ValuesFrom(make([][]any, n), nCols)
	return from
}

// jsonFrom is the SQLite dialect's json_each row source (sqlledger's Rows):
// columns c1..cn from one JSON array of arrays.
func jsonFrom(n int) string { return sqlschema.JSONEachFrom(n) }

// Config sizes the workloads.
type Config struct {
	Keys    int // distinct keys (100,000)
	Batches int // record: batches of Batch events
	Batch   int
	Naive   int // naive: events, one transaction each
	Blobs   int // intake: appends, one transaction each
	BlobKB  int
	Fold    int  // fold: rows folded from one JSON array
	Sorted  bool // fold: rows in key order (else random)
	Seed    uint64
}

// Main runs the workload named by -workload on the driver registered as
// sqlName and prints a Result as JSON; label names the driver in the output.
func Main(label, sqlName string) {
	var cfg Config
	wl := flag.String("workload", "", "record | naive | intake | fold (or: version)")
	dir := flag.String("dir", os.TempDir(), "directory for the database file (removed afterwards)")
	flag.IntVar(&cfg.Keys, "keys", 100_000, "distinct keys")
	flag.IntVar(&cfg.Batches, "batches", 200, "record: batches")
	flag.IntVar(&cfg.Batch, "batch", 1000, "record: events per batch")
	flag.IntVar(&cfg.Naive, "naive", 5000, "naive: events")
	flag.IntVar(&cfg.Blobs, "blobs", 500, "intake: appends")
	flag.IntVar(&cfg.BlobKB, "blobkb", 200, "intake: KB per append")
	flag.IntVar(&cfg.Fold, "fold", 100_000, "fold: rows")
	flag.BoolVar(&cfg.Sorted, "sorted", false, "fold: rows in key order (the folder sorts them) instead of random order")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed (same for every driver)")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the timed part here")
	flag.Parse()
	r, err := run(context.Background(), label, sqlName, *wl, *dir, cfg, *cpuprof)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", label, *wl, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(1)
	}
}

// pragmas are the ledger's (ledger/sqlite/sqlite.go), set on the one
// connection; _txlock=immediate (all three drivers read it from the DSN)
// makes every transaction BEGIN IMMEDIATE.
var pragmas = []string{"journal_mode=WAL", "synchronous=FULL", "busy_timeout=30000", "cache_size=-65536",
	"mmap_size=268435456", "temp_store=memory", "wal_autocheckpoint=16384"}

func open(ctx context.Context, sqlName, path string) (*sql.DB, string, error) {
	db, err := sql.Open(sqlName, "file:"+path+"?_txlock=immediate")
	if err != nil {
		return nil, "", err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	for _, p := range pragmas {
		if _, err := db.ExecContext(ctx, "PRAGMA "+p); err != nil {
			db.Close()
			return nil, "", fmt.Errorf("PRAGMA %s: %w", p, err)
		}
	}
	// The pragmas must hold on the connection the workload uses.
	var jm, ver string
	var syncMode int
	if err := db.QueryRowContext(ctx, "SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT synchronous FROM pragma_synchronous), sqlite_version()").Scan(&jm, &syncMode, &ver); err != nil {
		db.Close()
		return nil, "", err
	}
	if !strings.EqualFold(jm, "wal") || syncMode != 2 {
		db.Close()
		return nil, "", fmt.Errorf("pragmas not in force: journal_mode=%s synchronous=%d", jm, syncMode)
	}
	return db, ver, nil
}

func run(ctx context.Context, label, sqlName, wl, dir string, cfg Config, cpuprof string) (*Result, error) {
	tmp, err := os.MkdirTemp(dir, "sqlitedrivers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	t0 := time.Now()
	db, ver, err := open(ctx, sqlName, filepath.Join(tmp, "bench.db"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r := &Result{Driver: label, SQLite: ver, Workload: wl, OpenMS: ms(time.Since(t0)), Phases: map[string]float64{}}
	if wl == "version" {
		return r, nil
	}
	// Untimed setup.
	if wl != "intake" && wl != "naive" {
		for _, m := range migrations {
			if _, err := db.ExecContext(ctx, m); err != nil {
				return nil, err
			}
		}
	}
	g := newGen(cfg)
	var timed func() ([]time.Duration, error)
	switch wl {
	case "record":
		// The old Record at steady state: every key already has a row
		// (the 1M events over 100k keys write each key ~10 times).
		if _, err := fold(ctx, db, g.rows(g.perm(), 1)); err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
		timed = func() ([]time.Duration, error) { return record(ctx, db, g, cfg, r) }
	case "naive":
		timed = func() ([]time.Duration, error) { return naive(ctx, db, g, cfg, r) }
	case "intake":
		blobs := g.blobs(cfg.BlobKB * 1024)
		timed = func() ([]time.Duration, error) { return intake(ctx, db, blobs, cfg, r) }
	case "fold", "fold-update", "fold-jsonb":
		keys := g.perm()[:cfg.Fold]
		if wl == "fold-update" {
			if _, err := fold(ctx, db, g.rows(keys, 1)); err != nil {
				return nil, fmt.Errorf("prefill: %w", err)
			}
		}
		rev := 1
		if wl == "fold-update" {
			rev = 2
			g.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		}
		if cfg.Sorted {
			slices.Sort(keys)
		}
		blob := g.rows(keys, rev)
		f := fold
		if wl == "fold-jsonb" {
			f = foldJSONB
		}
		timed = func() ([]time.Duration, error) {
			r.Unit, r.Rows, r.Txs = "rows", len(keys), 1
			d, err := f(ctx, db, blob)
			return []time.Duration{d}, err
		}
	default:
		return nil, fmt.Errorf("unknown workload %q", wl)
	}
	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	cpu0 := cpuTime()
	start := time.Now()
	lat, err := timed()
	r.Secs = time.Since(start).Seconds()
	r.CPUSecs = (cpuTime() - cpu0).Seconds()
	if cpuprof != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, err
	}
	r.Rate = float64(r.Rows) / r.Secs
	slices.Sort(lat)
	if len(lat) > 0 {
		r.P50MS = ms(lat[len(lat)/2])
		r.P99MS = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	}
	return r, verify(ctx, db, wl, cfg, r)
}

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// gen makes the rows: key i is bucket "bench", ident/key
// "incoming/2026/03/obj-%07d.json", with an event's worth of values.
type gen struct {
	cfg Config
	rng *rand.Rand
}

func newGen(cfg Config) *gen { return &gen{cfg, rand.New(rand.NewPCG(cfg.Seed, 2))} }

func keyName(i int) string { return fmt.Sprintf("incoming/2026/03/obj-%07d.json", i) }

func (g *gen) perm() []int { return g.rng.Perm(g.cfg.Keys) }

func (g *gen) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[g.rng.IntN(16)]
	}
	return string(b)
}

// row is one ledger row (32 values, sqlledger's order) for key k at rev.
func (g *gen) row(k, rev int) []any {
	now := int64(1_770_000_000_000) + int64(g.rng.IntN(1_000_000))
	name := keyName(k)
	return []any{"bench", name, name, "", g.hex(32), int64(g.rng.IntN(1 << 20)), "put", "s3:ObjectCreated:Put", now,
		g.hex(16), "", "pending", int64(0), int64(0), int64(0), now, now, now, int64(rev), int64(0), "", "", "webhook",
		int64(rev), int64(0), int64(0), "s3", "us-east-1", g.hex(16), g.hex(40), "", int64(rev)}
}

// rows is a JSON array of rows for keys, all at rev.
func (g *gen) rows(keys []int, rev int) string {
	all := make([][]any, len(keys))
	for i, k := range keys {
		all[i] = g.row(k, rev)
	}
	b, _ := json.Marshal(all)
	return string(b)
}

// fold is the intake log's fold: one INSERT … SELECT … FROM json_each(blob)
// … ON CONFLICT DO UPDATE over the whole array, in one transaction.
func fold(ctx context.Context, db *sql.DB, blob string) (time.Duration, error) {
	return foldFrom(ctx, db, blob, jsonFrom(nCols))
}

// foldJSONB is fold with jsonb_each(jsonb(blob)): each row's value is
// handed to ->> as JSONB, not rendered back to text and parsed again once a
// column (json_each's value of an array is text).
func foldJSONB(ctx context.Context, db *sql.DB, blob string) (time.Duration, error) {
	from := strings.Replace(jsonFrom(nCols), "json_each(?)", "jsonb_each(jsonb(?))", 1)
	return foldFrom(ctx, db, blob, from)
}

func foldFrom(ctx context.Context, db *sql.DB, blob, from string) (time.Duration, error) {
	t := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	q := upsertHead + " FROM " + from + " WHERE true" + onConflictSet
	if _, err := tx.ExecContext(ctx, q, blob); err != nil {
		tx.Rollback()
		return 0, err
	}
	return time.Since(t), tx.Commit()
}

// record is the old Record: per batch of events on random keys, one
// transaction that reads the batch's rows (one statement over a json_each
// of the keys), decides, and writes every key's row back with the prepared
// 64/8/1-row upserts, checking each row was written.
func record(ctx context.Context, db *sql.DB, g *gen, cfg Config, r *Result) ([]time.Duration, error) {
	stmts := map[int]*sql.Stmt{}
	for _, n := range upsertSizes {
		st, err := db.PrepareContext(ctx, fmt.Sprintf(upsertFrom, valuesFrom(n)))
		if err != nil {
			return nil, err
		}
		defer st.Close()
		stmts[n] = st
	}
	load, err := db.PrepareContext(ctx, `SELECT `+cols+`, rev FROM cairn_ledger WHERE (bucket, ident) IN (SELECT c1, c2 FROM `+jsonFrom(2)+`)`)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	r.Unit = "events"
	var lat []time.Duration
	var tLoad, tUpsert, tCommit time.Duration
	for range cfg.Batches {
		// The batch's events, grouped by key in key order (as Record does);
		// the decision here is "write the newest event", so every key's row
		// is written once.
		seen := map[int]bool{}
		var keys []int
		for range cfg.Batch {
			k := g.rng.IntN(cfg.Keys)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		ids := make([][2]string, len(keys))
		for i, k := range keys {
			ids[i] = [2]string{"bench", keyName(k)}
		}
		idJSON, _ := json.Marshal(ids)
		t := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		revs := map[string]int64{}
		rows, err := tx.StmtContext(ctx, load).QueryContext(ctx, string(idJSON))
		if err != nil {
			tx.Rollback()
			return nil, err
		}
		dest := make([]any, nCols)
		vals := make([]any, nCols)
		for i := range dest {
			dest[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				tx.Rollback()
				return nil, err
			}
			ident, _ := vals[1].(string)
			if b, ok := vals[1].([]byte); ok {
				ident = string(b)
			}
			revs[ident] = vals[30].(int64)
		}
		if err := rows.Close(); err != nil {
			tx.Rollback()
			return nil, err
		}
		if err := rows.Err(); err != nil {
			tx.Rollback()
			return nil, err
		}
		t1 := time.Now()
		batch := make([][]any, len(keys))
		for i, k := range keys {
			batch[i] = g.row(k, int(revs[keyName(k)]+1))
		}
		for rest := batch; len(rest) > 0; {
			for _, n := range upsertSizes {
				for len(rest) >= n {
					a := make([]any, 0, n*nCols)
					for _, row := range rest[:n] {
						a = append(a, row...)
					}
					res, err := tx.StmtContext(ctx, stmts[n]).ExecContext(ctx, a...)
					if err != nil {
						tx.Rollback()
						return nil, err
					}
					if got, err := res.RowsAffected(); err != nil || got != int64(n) {
						tx.Rollback()
						return nil, fmt.Errorf("%d of %d rows written (%v)", got, n, err)
					}
					rest = rest[n:]
				}
			}
		}
		t2 := time.Now()
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		t3 := time.Now()
		tLoad += t1.Sub(t)
		tUpsert += t2.Sub(t1)
		tCommit += t3.Sub(t2)
		lat = append(lat, t3.Sub(t))
		r.Rows += cfg.Batch
		r.Writes += len(keys)
		r.Txs++
	}
	r.Phases["load"], r.Phases["upsert"], r.Phases["commit"] = tLoad.Seconds(), tUpsert.Seconds(), tCommit.Seconds()
	return lat, nil
}

// naive is cairn bench ledger's naive baseline: per event, one transaction
// that SELECTs the key's row and INSERTs or UPDATEs it.
func naive(ctx context.Context, db *sql.DB, g *gen, cfg Config, r *Result) ([]time.Duration, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE naive_processed (k TEXT PRIMARY KEY, seq TEXT NOT NULL, state TEXT NOT NULL)`); err != nil {
		return nil, err
	}
	r.Unit = "events"
	var lat []time.Duration
	var tStmt, tCommit time.Duration
	keys := map[string]bool{}
	for i := range cfg.Naive {
		k := "bench/" + keyName(g.rng.IntN(cfg.Keys))
		keys[k] = true
		seqNew := fmt.Sprintf("%016x", i+1)
		t := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		var seq, state string
		err = tx.QueryRowContext(ctx, `SELECT seq, state FROM naive_processed WHERE k = ?`, k).Scan(&seq, &state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO naive_processed (k, seq, state) VALUES (?, ?, 'PROCESSING')`, k, seqNew)
		case err == nil && seqNew > seq:
			_, err = tx.ExecContext(ctx, `UPDATE naive_processed SET seq = ?, state = 'PROCESSING' WHERE k = ?`, seqNew, k)
		}
		if err != nil {
			tx.Rollback()
			return nil, err
		}
		if err := commitTimed(tx, t, &tStmt, &tCommit, &lat); err != nil {
			return nil, err
		}
		r.Rows++
		r.Txs++
	}
	r.Phases["statements"], r.Phases["commit"] = tStmt.Seconds(), tCommit.Seconds()
	r.Writes = len(keys) // rows: one a distinct key
	return lat, nil
}

// blobs are 8 blobs of size bytes: rows as the intake log would hold them,
// varied so that nothing is shared between appends.
func (g *gen) blobs(size int) []string {
	var blobs []string
	for range 8 {
		var sb strings.Builder
		sb.WriteString("[")
		for sb.Len() < size-600 {
			if sb.Len() > 1 {
				sb.WriteString(",")
			}
			b, _ := json.Marshal(g.row(g.rng.IntN(g.cfg.Keys), 1))
			sb.Write(b)
		}
		sb.WriteString("]")
		blobs = append(blobs, sb.String()+strings.Repeat(" ", size-sb.Len()))
	}
	return blobs
}

// intake appends one BlobKB TEXT blob (a batch of events as JSON) per
// transaction to an append-only log.
func intake(ctx context.Context, db *sql.DB, blobs []string, cfg Config, r *Result) ([]time.Duration, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE cairn_intake (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return nil, err
	}
	size := cfg.BlobKB * 1024
	ins, err := db.PrepareContext(ctx, `INSERT INTO cairn_intake (body) VALUES (?)`)
	if err != nil {
		return nil, err
	}
	defer ins.Close()
	r.Unit = "blobs"
	var lat []time.Duration
	var tStmt, tCommit time.Duration
	for i := range cfg.Blobs {
		t := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if _, err := tx.StmtContext(ctx, ins).ExecContext(ctx, blobs[i%len(blobs)]); err != nil {
			tx.Rollback()
			return nil, err
		}
		if err := commitTimed(tx, t, &tStmt, &tCommit, &lat); err != nil {
			return nil, err
		}
		r.Rows++
		r.Txs++
	}
	r.Phases["statements"], r.Phases["commit"] = tStmt.Seconds(), tCommit.Seconds()
	r.Phases["mb_per_s"] = float64(cfg.Blobs*size) / (1 << 20) / (tStmt + tCommit).Seconds()
	return lat, nil
}

// verify checks the workload's effect in the file, so that a driver that
// did less than it claims fails the run instead of winning it.
func verify(ctx context.Context, db *sql.DB, wl string, cfg Config, r *Result) error {
	var n, sum int64
	switch wl {
	case "record":
		// Prefill wrote every key at rev 1; each batch raised each of its
		// keys' rev by one; seen (column 19) is written equal to rev.
		if err := db.QueryRowContext(ctx, `SELECT count(*), sum(rev) FROM cairn_ledger WHERE seen = rev`).Scan(&n, &sum); err != nil {
			return err
		}
		var writes int64
		if err := db.QueryRowContext(ctx, `SELECT sum(rev) - count(*) FROM cairn_ledger`).Scan(&writes); err != nil {
			return err
		}
		if n != int64(cfg.Keys) || writes != int64(r.Writes) {
			return fmt.Errorf("verify: %d rows consistent (want %d), %d row writes (want %d)", n, cfg.Keys, writes, r.Writes)
		}
	case "naive":
		// Every event's seq is newer than the last: its key's row holds
		// the seq of the key's last event.
		if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(max(seq), '') = printf('%016x', ?) FROM naive_processed WHERE state = 'PROCESSING'`, cfg.Naive).Scan(&n, &sum); err != nil {
			return err
		}
		if n != int64(r.Writes) || sum != 1 {
			return fmt.Errorf("verify: %d rows for %d keys (newest seq there: %v)", n, r.Writes, sum == 1)
		}
	case "intake":
		if err := db.QueryRowContext(ctx, `SELECT count(*), sum(length(body)) FROM cairn_intake`).Scan(&n, &sum); err != nil {
			return err
		}
		if n != int64(cfg.Blobs) || sum != int64(cfg.Blobs*cfg.BlobKB*1024) {
			return fmt.Errorf("verify: %d blobs, %d bytes", n, sum)
		}
	case "fold", "fold-update", "fold-jsonb":
		want := int64(1)
		if wl == "fold-update" {
			want = 2
		}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM cairn_ledger WHERE rev = ? AND seen = ? AND gen = ? AND typeof(size) = 'integer' AND length(host_id) = 40`, want, want, want).Scan(&n); err != nil {
			return err
		}
		if n != int64(cfg.Fold) {
			return fmt.Errorf("verify: %d of %d rows folded at rev %d", n, cfg.Fold, want)
		}
	}
	var ok string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		return fmt.Errorf("verify: integrity_check: %q %v", ok, err)
	}
	return nil
}

// commitTimed commits tx, begun at start, adding its statements' and its
// commit's time to stmt and commit and its whole time to lat.
func commitTimed(tx *sql.Tx, start time.Time, stmt, commit *time.Duration, lat *[]time.Duration) error {
	t1 := time.Now()
	if err := tx.Commit(); err != nil {
		return err
	}
	t2 := time.Now()
	*stmt += t1.Sub(start)
	*commit += t2.Sub(t1)
	*lat = append(*lat, t2.Sub(start))
	return nil
}
