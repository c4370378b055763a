// Package sqlledger is the intake ledger on SQL (database/sql), shared by the
// SQLite and PostgreSQL backends: they differ only in a Dialect (placeholders,
// row locking, the clock, the schema). All acceptance rules are driver.Decide,
// run inside each Record transaction.
//
// The operations are written once over an engine (engine.go), chosen once at
// New: on PostgreSQL each call is a transaction of its own over
// cairn_ledger; on SQLite the writer decides from a cache of rows and
// appends their images to an intake log, folded into cairn_ledger later
// (intakelog.go), in group-committed transactions (group.go).
//
// Concurrency: every row has a revision (rev) that every write bumps. Record
// is optimistic: it reads the rows of its keys without locking them, decides in
// Go, and writes each row only if its revision is still the one it read (one
// guarded upsert); a key another worker changed in between is read again and
// decided again, in the same transaction. On SQLite every writing transaction
// is also BEGIN IMMEDIATE (one writer at a time, durable at commit in WAL
// mode), so the guard never fails there; on PostgreSQL it lets many workers
// record at once without row locks, and Claim picks rows FOR UPDATE SKIP LOCKED
// so workers on many machines claim disjoint work without application locks.
//
// # Lock order
//
// Every statement that locks several rows locks them in one global order, the
// primary key (bucket, ident), byte-wise (COLLATE "C" on PostgreSQL, as Go
// compares strings), so concurrent transactions cannot deadlock on row locks:
//
//   - Record and RecordAndClaim write their rows with one upsert over a row
//     source sorted by (bucket, ident), which inserts and locks in that order.
//   - CompleteBatch first locks its rows with SELECT … ORDER BY bucket, ident
//     FOR UPDATE, then updates them (an UPDATE … FROM joins in whatever order
//     the planner picks, which is not the order of the list).
//   - Replay and Purge select their rows ORDER BY bucket, ident FOR UPDATE in a
//     materialised CTE and change only those; Purge deletes in batches of
//     purgeBatch rows, each its own transaction.
//   - Claim locks FOR UPDATE SKIP LOCKED: it never waits for a lock, so it is
//     never part of a cycle. Complete, Fail, Release and Renew change one row.
//   - RecordAndClaim runs Claim's statement after its upsert, never before:
//     a transaction that holds rows locked out of key order never waits.
//
// # Transient conflicts
//
// A transaction that fails with a transient conflict all the same (PostgreSQL
// deadlock_detected 40P01 or serialization_failure 40001, e.g. against a
// foreign writer; SQLite SQLITE_BUSY / SQLITE_LOCKED) is rolled back and run
// again from the start, after a jittered backoff (1 ms doubling to 250 ms),
// for as long as the caller's ctx allows: the bound is ctx alone (the intake
// pipeline gives each ledger call at most 30 s). A caller sees such an error
// only when ctx ended first, wrapped with the number of attempts.
package sqlledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/internal/sqlschema"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// Dialect is what differs between SQL databases.
type Dialect struct {
	Name string
	// Rebind turns "?" placeholders into the database's own.
	Rebind func(string) string
	// SkipLocked is appended to the claim's candidate query ("FOR UPDATE
	// SKIP LOCKED" on PostgreSQL).
	SkipLocked string
	// KeyIndexHint makes per-key lookups use the (bucket, key) index
	// ("INDEXED BY cairn_ledger_key" on SQLite, whose planner otherwise scans).
	KeyIndexHint string
	// Rows turns a list of rows (each a list of column values) into a SQL
	// row source with columns c1..cN and its arguments: json_each over one JSON
	// argument on SQLite, unnest over one array per column on PostgreSQL. It
	// lets one prepared statement read or write a whole batch.
	Rows func(rows [][]any, types []string) (from string, args []any)
	// BatchUpsert writes a batch with one statement over Rows.
	BatchUpsert bool
	// ServerNow, if set, reads the database server's clock (unix ms).
	ServerNow string
	// Migrations, in order; migration i brings the schema to version i+1.
	Migrations []string
	// MigrationLock, if set, is the statement that makes the migration's
	// transaction wait for every other one (PostgreSQL: a transaction-scoped
	// advisory lock), run before anything else in it, even the creation of
	// the schema table: two concurrent CREATE TABLE IF NOT EXISTS collide in
	// PostgreSQL's catalog. Empty where beginning a transaction already
	// excludes other writers (SQLite's BEGIN IMMEDIATE).
	MigrationLock string
	// Classify maps driver errors (e.g. connection refused) to ledger errors.
	Classify func(error) error
	// LockRows is the locking clause ("FOR UPDATE" on PostgreSQL) with which a
	// statement that changes several rows first locks them, in (bucket,
	// ident) order. Empty where every writing transaction is exclusive
	// (SQLite's BEGIN IMMEDIATE), so no row lock is ever waited for.
	LockRows string
	// Transient, if set, tells an error after which the whole transaction may
	// run again: a deadlock, a serialization failure, a busy database.
	Transient func(error) bool
	// IntakeLog (SQLite only; needs LogMigration among Migrations and a
	// database/sql pool of one connection) records batches into the intake
	// log instead of writing their rows: see intakelog.go.
	IntakeLog bool
	// LogLimits bound the intake log (zero: defaults).
	LogLimits LogLimits
	// ErrorClassAt is the schema version (a count of Migrations) from which
	// cairn_ledger has its error_class column: a migration from below it
	// fills the column in for the rows already there (backfillClasses).
	ErrorClassAt int
}

// Backend is a SQL intake ledger (a ledger.Backend).
type Backend struct {
	db   *sql.DB
	d    Dialect
	opts ledger.Options
	// upserts are the multi-row upsert statements for upsertSizes rows,
	// prepared once (SQLite spends more preparing a large statement than
	// running it); nil where the dialect upserts a batch in one statement.
	upserts map[int]*sql.Stmt
	// folds are the same for folding the intake log (over older revisions
	// only).
	folds map[int]*sql.Stmt
	// prepared are statements of the intake log's transactions, prepared
	// once by their text (preparing costs SQLite as much as a small
	// transaction's work); see query and exec.
	prepared map[string]*sql.Stmt
	// eng runs the transactions: a logEngine with Dialect.IntakeLog, else
	// a sqlEngine (see engine).
	eng engine
}

var _ ledger.Backend = (*Backend)(nil)

// upsertSizes are the row counts of the prepared upserts, largest first.
var upsertSizes = sqlschema.UpsertSizes

// New migrates the schema and returns a Backend on db.
func New(ctx context.Context, db *sql.DB, d Dialect, opts *ledger.Options) (*Backend, error) {
	l := &Backend{db: db, d: d, opts: driver.Defaults(opts)}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	if !d.BatchUpsert {
		l.upserts, l.folds = map[int]*sql.Stmt{}, map[int]*sql.Stmt{}
		for _, n := range upsertSizes {
			from, _ := valuesFrom(make([][]any, n), len(colTypes))
			st, err := db.PrepareContext(ctx, l.q(fmt.Sprintf(upsertFrom, from)))
			if err != nil {
				l.closeStmts()
				return nil, fmt.Errorf("ledger: preparing statements: %w", err)
			}
			l.upserts[n] = st
			if d.IntakeLog {
				if st, err = db.PrepareContext(ctx, l.q(upsertHead+" FROM "+from+" WHERE true"+foldConflict)); err != nil {
					l.closeStmts()
					return nil, fmt.Errorf("ledger: preparing statements: %w", err)
				}
				l.folds[n] = st
			}
		}
	}
	if d.IntakeLog {
		loadFrom, _ := d.Rows(nil, []string{"text", "text"})
		l.prepared = map[string]*sql.Stmt{}
		for _, q := range append(logStatements, l.q(`SELECT `+cols+`, rev FROM cairn_ledger WHERE (bucket, ident) IN (SELECT c1, c2 FROM `+loadFrom+`)`)) {
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				l.closeStmts()
				return nil, fmt.Errorf("ledger: preparing statements: %w", err)
			}
			l.prepared[q] = st
		}
		g := &intakeLog{maxRows: cmp.Or(d.LogLimits.Rows, 1<<18), maxBytes: cmp.Or(d.LogLimits.Bytes, 256<<20)}
		g.maxShadow = min(maxShadow, g.maxRows/4)
		l.eng = &logEngine{Backend: l, log: g}
	} else {
		l.eng = sqlEngine{l}
	}
	return l, nil
}

func (l *Backend) closeStmts() {
	for _, m := range []map[int]*sql.Stmt{l.upserts, l.folds} {
		for _, st := range m {
			st.Close()
		}
	}
	for _, st := range l.prepared {
		st.Close()
	}
}

// query runs q in tx, prepared once if it is one of l.prepared.
func (l *Backend) query(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st, ok := l.prepared[q]; ok {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

// exec is query for statements that return no rows.
func (l *Backend) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st, ok := l.prepared[q]; ok {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// DB returns the underlying database handle.
func (l *Backend) DB() *sql.DB { return l.db }

// Close closes the database.
func (l *Backend) Close() error {
	l.eng.close()
	l.closeStmts()
	return l.db.Close()
}

func (l *Backend) q(s string) string { return l.d.Rebind(s) }

func (l *Backend) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if l.d.Classify != nil {
		err = l.d.Classify(err)
	}
	if errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	return fmt.Errorf("ledger (%s) %s: %w", l.d.Name, op, err)
}

// conflictBackoff is the wait between runs of a transaction that hit a
// transient conflict (full jitter: conflicting transactions that failed
// together must not run again together).
var conflictBackoff = backoff.Policy{Base: 2 * time.Millisecond, Max: 250 * time.Millisecond}

// inTx runs fn in a transaction, with the transaction's time, and commits. A
// transient conflict (Dialect.Transient) rolls the transaction back and runs
// fn again after a jittered backoff, until ctx ends; fn must therefore keep
// no state of its own between runs. Errors from fn are returned as they are
// (fn wraps its own, see also abandoned); the rest are wrapped with op.
func (l *Backend) inTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) error {
	for attempt := 1; ; attempt++ {
		err := l.eng.tryTx(ctx, op, fn)
		if err == nil || l.d.Transient == nil || !l.d.Transient(err) {
			return err
		}
		if conflictBackoff.Wait(ctx, attempt-1) != nil {
			return fmt.Errorf("ledger (%s) %s: a transient conflict persisted over %d attempts until the context ended (%v): %w",
				l.d.Name, op, attempt, context.Cause(ctx), err)
		}
	}
}

// abandoned is err, an error of tx's statements before its commit, made to
// say so when database/sql had rolled tx back because ctx ended (from a
// goroutine of its own): a statement that runs after that fails with an
// error that does not tell why ("sql: statement is closed" for a prepared
// one, ErrTxDone for the rest), and a caller must be able to tell a call it
// gave up on (errors.Is(err, ctx.Err())) from a failing database. An error
// of a live transaction stays as it is; tx is rolled back either way.
func abandoned(ctx context.Context, tx *sql.Tx, err error) error {
	if !errors.Is(tx.Rollback(), sql.ErrTxDone) {
		return err
	}
	return rolledBack(ctx, err)
}

// commit commits tx. Commit answers ErrTxDone only when the COMMIT never
// ran, database/sql having rolled tx back already (see abandoned): that
// error says so. Any other error of a COMMIT that ran, whose outcome may be
// unknown, is returned as it is.
func commit(ctx context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	if errors.Is(err, sql.ErrTxDone) {
		return rolledBack(ctx, err)
	}
	return err
}

// rolledBack wraps ctx's error, if ctx ended, into err, an error of a
// transaction database/sql rolled back.
func rolledBack(ctx context.Context, err error) error {
	if ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (database/sql rolled the transaction back: the call's context ended: %w)", err, ctx.Err())
}

// The ops of the transactions that may leave the intake log unfolded (see
// logged).
const (
	opRecord   = "record"
	opClaim    = "claim"
	opComplete = "complete"
	opRenew    = "renew"
	opFail     = "fail"
	opRelease  = "release"
)

// migrate brings the schema up to date. A transient conflict (another
// process opening the same fresh SQLite file converts it to WAL while this
// one opens its connection: SQLite answers SQLITE_BUSY at once there, without
// waiting on busy_timeout) runs the whole migration again after a jittered
// backoff until ctx ends, as inTx does for every other transaction.
func (l *Backend) migrate(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := l.migrateOnce(ctx)
		if err == nil || l.d.Transient == nil || !l.d.Transient(err) {
			return err
		}
		if conflictBackoff.Wait(ctx, attempt-1) != nil {
			return fmt.Errorf("ledger (%s) migrating: a transient conflict persisted over %d attempts until the context ended (%v): %w",
				l.d.Name, attempt, context.Cause(ctx), err)
		}
	}
}

func (l *Backend) migrateOnce(ctx context.Context) error {
	if l.opts.MustExist {
		// Nothing is created in a database that holds no ledger.
		q := `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cairn_schema')`
		if l.d.Name == "postgres" {
			q = `SELECT to_regclass('cairn_schema') IS NOT NULL`
		}
		var exists bool
		if err := l.db.QueryRowContext(ctx, q).Scan(&exists); err != nil {
			return l.wrap("looking for the ledger's tables", err)
		}
		if !exists {
			return fmt.Errorf("%w: the %s database has no cairn_schema table", ledger.ErrNoLedger, l.d.Name)
		}
	}
	// Everything, the schema table included, is created in one transaction
	// that first excludes every other migration (processes starting at once
	// on a fresh database): the lock, then the table, then its version.
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.wrap("migrating", err)
	}
	defer tx.Rollback()
	if l.d.MigrationLock != "" {
		if _, err := tx.ExecContext(ctx, l.d.MigrationLock); err != nil {
			return l.wrap("waiting for other processes' migrations", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS cairn_schema (version INTEGER NOT NULL)`); err != nil {
		return l.wrap("creating the schema table", err)
	}
	var v int
	err = tx.QueryRowContext(ctx, `SELECT version FROM cairn_schema`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO cairn_schema (version) VALUES (0)`); err != nil {
			return l.wrap("migrating", err)
		}
	} else if err != nil {
		return l.wrap("reading the schema version", err)
	}
	if v > len(l.d.Migrations) {
		return fmt.Errorf("ledger (%s): the database has schema version %d, newer than this cairn knows (%d); upgrade cairn", l.d.Name, v, len(l.d.Migrations))
	}
	for i := v; i < len(l.d.Migrations); i++ {
		if _, err := tx.ExecContext(ctx, l.d.Migrations[i]); err != nil {
			return l.wrap(fmt.Sprintf("migration %d", i+1), err)
		}
	}
	if v < l.d.ErrorClassAt && l.d.ErrorClassAt <= len(l.d.Migrations) {
		if err := l.backfillClasses(ctx, tx); err != nil {
			return l.wrap("filling in the error classes of the records there", err)
		}
	}
	if _, err := tx.ExecContext(ctx, l.q(`UPDATE cairn_schema SET version = ?`), len(l.d.Migrations)); err != nil {
		return l.wrap("migrating", err)
	}
	return l.wrap("migrating", tx.Commit())
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// now returns the time used for leases: the server's clock where the dialect
// has one (unless a test clock is set), else the local clock.
func (l *Backend) now(ctx context.Context, q querier) (time.Time, error) {
	if l.opts.Now != nil {
		return l.opts.Now(), nil
	}
	if l.d.ServerNow == "" {
		return time.Now(), nil
	}
	var ms int64
	if err := q.QueryRowContext(ctx, l.d.ServerNow).Scan(&ms); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// cols are the ledger's columns in the order rows are written and read (rev
// follows).
const cols = sqlschema.Cols

func ms(t time.Time) int64     { return driver.UnixMilli(t) }
func fromMS(v int64) time.Time { return driver.FromUnixMilli(v) }

type scanner interface{ Scan(...any) error }

// scanRecord scans a row of cols, and of any further columns into extra.
func scanRecord(s scanner, extra ...any) (ledger.Claim, error) {
	var c ledger.Claim
	var kind, status, seqSort, format, class string
	var evTime, lease, next, first, upd int64
	err := s.Scan(append([]any{&c.Bucket, &c.Ident, &c.Key, &c.VersionID, &c.ETag, &c.Size, &kind, &c.Name, &evTime, &c.Seq, &seqSort,
		&status, &c.Attempts, &c.Token, &lease, &next, &first, &upd, &c.Seen, &c.Stale, &c.LastError, &c.Result, &c.Source,
		&c.Gen, &c.RunGen, &c.Replays, &format, &c.Region, &c.RequestID, &c.HostID, &class}, extra...)...)
	c.Kind, c.Status, c.Format = event.Kind(kind), ledger.Status(status), event.Format(format)
	c.EventTime, c.LeaseUntil, c.NextAttempt, c.FirstSeen, c.Updated = fromMS(evTime), fromMS(lease), fromMS(next), fromMS(first), fromMS(upd)
	return c, err
}

// args returns a row's columns (cols, then rev) as a statement's arguments.
func (l *Backend) args(ident string, r *ledger.Record, rev int64) []any {
	a := make([]any, 0, len(colTypes))
	l.columns(ident, r, rev, func(s string) { a = append(a, s) }, func(v int64) { a = append(a, v) })
	return a
}

// columns passes each column of a row (cols, then rev; colTypes gives their
// types) to text or num, in order: the one list of a row's values, for the
// statements' arguments (args) and the intake log's images (appendImage).
func (l *Backend) columns(ident string, r *ledger.Record, rev int64, text func(string), num func(int64)) {
	sortSeq := "" // only every-version claims compare sequencers in SQL
	if l.opts.EveryVersion {
		sortSeq = driver.SortSeq(r.Seq)
	}
	text(r.Bucket)
	text(ident)
	text(r.Key)
	text(r.VersionID)
	text(r.ETag)
	num(r.Size)
	text(string(r.Kind))
	text(r.Name)
	num(ms(r.EventTime))
	text(r.Seq)
	text(sortSeq)
	text(string(r.Status))
	num(int64(r.Attempts))
	num(r.Token)
	num(ms(r.LeaseUntil))
	num(ms(r.NextAttempt))
	num(ms(r.FirstSeen))
	num(ms(r.Updated))
	num(int64(r.Seen))
	num(int64(r.Stale))
	text(r.LastError)
	text(r.Result)
	text(r.Source)
	num(r.Gen)
	num(r.RunGen)
	num(int64(r.Replays))
	text(string(r.Format))
	text(r.Region)
	text(r.RequestID)
	text(r.HostID)
	text(driver.ErrorClass(r.LastError))
	num(rev)
}

// colTypes are the SQL types of cols and rev, for Dialect.Rows.
var colTypes = sqlschema.ColTypes

// The upserts' text (see package sqlschema): upsertHead inserts the columns
// c1..c32 of a row source; upsertFrom writes rows whose revision is still the
// one Record read; onConflictSet is the conflict clause each upsert guards.
const (
	upsertHead    = sqlschema.UpsertHead
	upsertFrom    = sqlschema.UpsertFrom
	onConflictSet = sqlschema.OnConflictSet
)

type rowID struct{ bucket, ident string }

// RecordAndClaim records evs, deciding each (see driver.Decide), and then, in
// the same transaction, claims up to n records as Claim would (n = 0: record
// only, what ledger.Ledger.Record is). The claim runs after the record's
// writes: on PostgreSQL every lock the record waits for is taken in key order
// before the claim locks anything out of that order (SKIP LOCKED, never
// waiting), so the two steps cannot deadlock with other transactions.
//
// Where the engine says so (engine.claimsAsRecorded), the record's write
// takes the rows this batch made pending claimed at once, in delivery order,
// instead of a claim after it.
func (l *Backend) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	if l.opts.EveryVersion {
		n = 0 // versions of a key must run oldest first: leave it to Claim
	}
	return l.record(ctx, source, evs, n, lease)
}

// maxRounds bounds how often one Record reads and decides a key again because
// other writers changed it meanwhile (each such round means another writer
// made progress on the key).
const maxRounds = 1000

// row is a record as read, with its revision (0: no row).
type row struct {
	rec *ledger.Record
	rev int64
}

func (l *Backend) record(ctx context.Context, source string, evs []event.Event, claimN int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	out := make([]ledger.Decision, len(evs))
	var ids []rowID
	byID := map[rowID][]int{} // the events of each row, in delivery order
	for i, ev := range evs {
		out[i] = ledger.Decision{Outcome: ledger.Ignored, Bucket: ev.Bucket, Key: ev.Key, Seq: ev.Sequencer}
		if ev.Ignorable() {
			continue
		}
		id := rowID{ev.Bucket, driver.Ident(ev, l.opts.EveryVersion)}
		if _, ok := byID[id]; !ok {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], i)
	}
	if len(ids) == 0 {
		return out, nil, nil
	}
	// Key order: the order rows are written (and locked) in, so concurrent
	// batches touching the same keys cannot deadlock.
	slices.SortFunc(ids, compareID)
	var claims []ledger.Claim
	err := l.inTx(ctx, opRecord, func(tx *sql.Tx, now time.Time) error {
		claims = nil
		if claimN > 0 {
			early, err := l.eng.claimsAsRecorded(ctx, tx, now)
			if err != nil {
				return err
			}
			if early {
				return l.recordTx(ctx, tx, now, evs, source, ids, byID, out, &claims, claimN, lease)
			}
		}
		if err := l.recordTx(ctx, tx, now, evs, source, ids, byID, out, nil, 0, 0); err != nil || claimN <= 0 {
			return err
		}
		var err error
		claims, err = l.eng.claim(ctx, tx, now, claimN, lease)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	driver.SortClaims(claims)
	return out, claims, nil
}

func compareID(a, b rowID) int {
	return cmp.Or(strings.Compare(a.bucket, b.bucket), strings.Compare(a.ident, b.ident))
}

// recordTx is one run of record's writes: it decides out, and writes up to
// claimN of the rows the batch made pending claimed, in delivery order (into
// *claimsOut).
func (l *Backend) recordTx(ctx context.Context, tx *sql.Tx, now time.Time, evs []event.Event, source string, ids []rowID,
	byID map[rowID][]int, out []ledger.Decision, claimsOut *[]ledger.Claim, claimN int, lease time.Duration) error {
	var claims []ledger.Claim
	todo := ids
	for round := 0; len(todo) > 0; round++ {
		if round == maxRounds {
			return l.wrap("record", fmt.Errorf("%d keys still changed by other writers after %d rounds", len(todo), maxRounds))
		}
		cur, err := l.eng.load(ctx, tx, todo)
		if err != nil {
			return l.wrap("record", err)
		}
		next := make(map[rowID]*ledger.Record, len(todo))
		for _, id := range todo {
			r := cur[id].rec
			for _, i := range byID[id] {
				o, n := driver.Decide(r, evs[i], source, now, l.opts.EveryVersion)
				out[i].Outcome = o
				if n != nil {
					r = n
				}
			}
			next[id] = r
		}
		for _, ev := range evs {
			if len(claims) >= claimN {
				break
			}
			if ev.Ignorable() {
				continue
			}
			id := rowID{ev.Bucket, driver.Ident(ev, l.opts.EveryVersion)}
			r, ok := next[id]
			if !ok || r.Status != ledger.Pending || r == cur[id].rec {
				continue
			}
			c := claimed(r, now, lease)
			next[id] = &c
			claims = append(claims, ledger.Claim{Record: c, Ident: id.ident})
		}
		changed := make(map[rowID]*row, len(todo))
		for _, id := range todo {
			if next[id] != cur[id].rec {
				changed[id] = &row{next[id], cur[id].rev + 1}
			}
		}
		written, err := l.eng.write(ctx, tx, changed)
		if err != nil {
			return l.wrap("record", err)
		}
		var again []rowID
		for _, id := range todo {
			if next[id] != cur[id].rec && !written[id] {
				again = append(again, id)
			}
		}
		if len(again) > 0 {
			// Forget the claims of the keys decided again.
			claims = slices.DeleteFunc(claims, func(c ledger.Claim) bool {
				return slices.Contains(again, rowID{c.Bucket, c.Ident})
			})
		}
		todo = again
	}
	if claimsOut != nil {
		*claimsOut = claims
	}
	return nil
}

// upsert writes rows (l.args, in key order) with upsertFrom and returns those
// written. PostgreSQL: one statement over the batch, whose RETURNING names
// the rows written. SQLite: multi-row statements prepared once, 64, 8 and 1
// rows at a time (a function call each, not a round trip); its transactions
// are exclusive, so every row is written, which the changed-row count checks.
func (l *Backend) upsert(ctx context.Context, tx *sql.Tx, batch [][]any) (map[rowID]bool, error) {
	written := make(map[rowID]bool, len(batch))
	if len(batch) == 0 {
		return written, nil
	}
	if l.d.BatchUpsert {
		from, a := l.d.Rows(batch, colTypes)
		res, err := tx.QueryContext(ctx, l.q(fmt.Sprintf(upsertFrom, from)+` RETURNING bucket, ident`), a...)
		if err != nil {
			return nil, err
		}
		defer res.Close()
		for res.Next() {
			var id rowID
			if err := res.Scan(&id.bucket, &id.ident); err != nil {
				return nil, err
			}
			written[id] = true
		}
		return written, res.Err()
	}
	if err := l.execChunks(ctx, tx, l.upserts, batch, true); err != nil {
		return nil, err
	}
	for _, r := range batch {
		written[rowID{r[0].(string), r[1].(string)}] = true
	}
	return written, nil
}

// images returns the rows of next as l.args, in key order.
func (l *Backend) images(next map[rowID]*row) [][]any {
	ids := sortedIDs(next)
	batch := make([][]any, len(ids))
	for i, id := range ids {
		batch[i] = l.args(id.ident, next[id].rec, next[id].rev)
	}
	return batch
}

// sortedIDs returns the keys of rows in key order.
func sortedIDs(rows map[rowID]*row) []rowID {
	ids := make([]rowID, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareID)
	return ids
}

// execChunks runs the multi-row statements stmts (by row count, upsertSizes)
// over batch, largest first. exact: every row must be written (the
// transaction is exclusive), which the changed-row count checks.
func (l *Backend) execChunks(ctx context.Context, tx *sql.Tx, stmts map[int]*sql.Stmt, batch [][]any, exact bool) error {
	for rest := batch; len(rest) > 0; {
		for _, n := range upsertSizes {
			for len(rest) >= n {
				a := make([]any, 0, n*len(rest[0]))
				for _, r := range rest[:n] {
					a = append(a, r...)
				}
				res, err := tx.StmtContext(ctx, stmts[n]).ExecContext(ctx, a...)
				if err != nil {
					return err
				}
				if got, err := res.RowsAffected(); exact && (err != nil || got != int64(n)) {
					return fmt.Errorf("%d of %d rows written inside an exclusive transaction (%v): another writer bypassed the lock", got, n, err)
				}
				rest = rest[n:]
			}
		}
	}
	return nil
}

// valuesRows bounds the rows of one multi-row statement (SQLite allows 32,766
// parameters).
const valuesRows = 500

// valuesFrom is a row source over rows with columns c1..cols: a SELECT over a
// VALUES list (whose columns SQLite names column1, column2, …).
func valuesFrom(rows [][]any, cols int) (string, []any) { return sqlschema.ValuesFrom(rows, cols) }

// loadTable reads the rows of ids and their revisions from cairn_ledger, in
// one statement, without locking them (Record's upsert checks the
// revisions).
func (l *Backend) loadTable(ctx context.Context, tx *sql.Tx, ids []rowID) (map[rowID]row, error) {
	cur := make(map[rowID]row, len(ids))
	rows := make([][]any, 0, len(ids))
	for _, id := range ids {
		if utf8.ValidString(id.bucket) && utf8.ValidString(id.ident) {
			rows = append(rows, []any{id.bucket, id.ident})
			continue
		}
		// A JSON row source (SQLite's Dialect.Rows) cannot carry invalid
		// UTF-8 exactly: such a key is looked up on its own.
		res, err := l.query(ctx, tx, l.q(`SELECT `+cols+`, rev FROM cairn_ledger WHERE bucket = ? AND ident = ?`), id.bucket, id.ident)
		if err != nil {
			return nil, err
		}
		err = scanRows(res, cur)
		if err != nil {
			return nil, err
		}
	}
	if len(rows) == 0 {
		return cur, nil
	}
	from, a := l.d.Rows(rows, []string{"text", "text"})
	q := `SELECT ` + cols + `, rev FROM cairn_ledger WHERE (bucket, ident) IN (SELECT c1, c2 FROM ` + from + `)`
	res, err := l.query(ctx, tx, l.q(q), a...)
	if err != nil {
		return nil, err
	}
	return cur, scanRows(res, cur)
}

// scanRows scans rows of cols and rev into cur, and closes them.
func scanRows(res *sql.Rows, cur map[rowID]row) error {
	defer res.Close()
	for res.Next() {
		var rev int64
		c, err := scanRecord(res, &rev)
		if err != nil {
			return err
		}
		r := c.Record
		cur[rowID{c.Bucket, c.Ident}] = row{&r, rev}
	}
	return res.Err()
}

// Claim leases up to n records of work: pending or failed records whose retry
// time has come, and claimed records whose lease expired. Per key, only when no
// other version of the key is claimed or waiting with an older sequencer.
func (l *Backend) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	var out []ledger.Claim
	err := l.inTx(ctx, opClaim, func(tx *sql.Tx, now time.Time) error {
		var err error
		out, err = l.eng.claim(ctx, tx, now, n, lease)
		return err
	})
	if err != nil {
		return nil, err
	}
	driver.SortClaims(out)
	return out, nil
}

// claimed is r claimed at now: Claim's statement in Go.
func claimed(r *ledger.Record, now time.Time, lease time.Duration) ledger.Record {
	c := *r
	c.Status, c.Token, c.LeaseUntil, c.Attempts, c.RunGen, c.Updated = ledger.Claimed, driver.ClaimToken(c.Token, ms(now)), now.Add(lease), c.Attempts+1, c.Gen, now
	return c
}

// claimTx is one run of Claim's transaction. The candidates are locked FOR
// UPDATE SKIP LOCKED (never waiting for a lock); the UPDATE then changes only
// rows this transaction has locked.
func (l *Backend) claimTx(ctx context.Context, tx *sql.Tx, now time.Time, n int, lease time.Duration) ([]ledger.Claim, error) {
	nowMS := ms(now)
	// Candidates come off the (status, next_at) index in next_at order, which is
	// first-in first-out for pending work and retry order for failed work; LIMIT
	// stops the scan early, so a claim costs O(n), not O(table).
	perKey, perKeyArgs := "", []any{}
	tokenSet, tokenArgs := `CASE WHEN token = 0 THEN ? ELSE token + 1 END`, []any{driver.ClaimToken(0, nowMS)}
	if l.opts.EveryVersion {
		// driver.VersionToken: above every token of the key's rows (this
		// one's included), read in the statement that claims; the per-key
		// condition below lets one version of a key be claimed at a time.
		tokenSet = `(SELECT CASE WHEN cairn_ledger.token = 0 AND MAX(o.token) < ? THEN ? ELSE MAX(o.token) + 1 END
  FROM cairn_ledger o ` + l.d.KeyIndexHint + ` WHERE o.bucket = cairn_ledger.bucket AND o.key = cairn_ledger.key)`
		tokenArgs = append(tokenArgs, driver.ClaimToken(0, nowMS))
		// One version of a key at a time, oldest sequencer first; of versions
		// with one sequencer (or none) the first by ident, so that one
		// statement never claims two (it reads the key's rows as they were
		// before it: both would pass, with one token on PostgreSQL).
		perKey = `AND NOT EXISTS (SELECT 1 FROM cairn_ledger o ` + l.d.KeyIndexHint + ` WHERE o.bucket = l.bucket AND o.key = l.key AND o.ident <> l.ident
      AND ((o.status = 'claimed' AND o.lease_until >= ?) OR (o.status IN ('pending', 'failed', 'claimed')
        AND (o.seq_sort < l.seq_sort OR (o.seq_sort = l.seq_sort AND o.ident < l.ident)))))`
		perKeyArgs = append(perKeyArgs, nowMS)
	}
	q := `UPDATE cairn_ledger SET status = 'claimed', token = ` + tokenSet + `, lease_until = ?, attempts = attempts + 1,
run_gen = gen, updated = ?, rev = rev + 1
WHERE (bucket, ident) IN (
  SELECT l.bucket, l.ident FROM cairn_ledger l
  WHERE ((l.status IN ('pending', 'failed') AND l.next_at <= ?) OR (l.status = 'claimed' AND l.lease_until < ?)) ` + perKey + `
  LIMIT ? ` + l.d.SkipLocked + `)
RETURNING ` + cols
	qargs := append(append(tokenArgs[:len(tokenArgs):len(tokenArgs)], nowMS+lease.Milliseconds(), nowMS, nowMS, nowMS), perKeyArgs...)
	qargs = append(qargs, n)
	if l.d.SkipLocked != "" {
		// PostgreSQL plans the OR above as a bitmap scan: it reads every
		// candidate (and every dead index entry: bitmap scans never mark them
		// dead) and returns them in heap order, not FIFO. One ordered index scan
		// per state instead, each stopping after n locked rows: pending and
		// failed work in next_at order off the work index, expired leases in
		// expiry order off the lease index (the work index would read every
		// live claim, on every claim): when more than n leases ran out, the n
		// that ran out first are the candidates. The n earliest (next_at) of
		// all candidates are claimed
		// (the others' locks end at commit). They are found
		// by bucket, key and ident, so that either index finds each at once: on
		// a table whose statistics are stale (a young ledger) the planner may
		// look (bucket, ident) up through the (bucket, key) index, reading the
		// whole bucket for each row.
		arm := func(where, order string) string {
			return `SELECT l.bucket, l.key, l.ident, l.next_at FROM cairn_ledger l WHERE ` + where + ` ` + perKey + `
  ORDER BY ` + order + ` LIMIT ? ` + l.d.SkipLocked
		}
		q = `WITH p AS (` + arm(`l.status = 'pending' AND l.next_at <= ?`, `l.next_at`) + `),
f AS (` + arm(`l.status = 'failed' AND l.next_at <= ?`, `l.next_at`) + `),
x AS (` + arm(`l.status = 'claimed' AND l.lease_until < ?`, `l.lease_until`) + `)
UPDATE cairn_ledger SET status = 'claimed', token = ` + tokenSet + `, lease_until = ?, attempts = attempts + 1,
run_gen = gen, updated = ?, rev = rev + 1
WHERE (bucket, key, ident) IN (SELECT c.bucket, c.key, c.ident FROM (SELECT * FROM p UNION ALL SELECT * FROM f UNION ALL SELECT * FROM x) c
  ORDER BY c.next_at LIMIT ?)
RETURNING ` + cols
		qargs = nil
		for range 3 {
			qargs = append(append(append(qargs, nowMS), perKeyArgs...), n)
		}
		qargs = append(append(qargs, tokenArgs...), nowMS+lease.Milliseconds(), nowMS, n)
	}
	rows, err := tx.QueryContext(ctx, l.q(q), qargs...)
	if err != nil {
		return nil, l.wrap("claim", err)
	}
	var out []ledger.Claim
	for rows.Next() {
		c, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, l.wrap("claim", err)
		}
		out = append(out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, l.wrap("claim", err)
	}
	return out, nil
}

// finish makes ch to c's row in a transaction of its own, if c still holds
// the claim (see engine.changeClaim).
func (l *Backend) finish(ctx context.Context, op string, c ledger.Claim, ch claimChange) error {
	return l.inTx(ctx, op, func(tx *sql.Tx, now time.Time) error {
		return l.eng.changeClaim(ctx, tx, now, op, c, ch)
	})
}

// refused tells changeClaim's explained refusals (lease lost, superseded, not
// found), which leave the transaction usable.
func refused(err error) bool {
	return errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, errCompleted)
}

// errCompleted is the answer to a Complete of a row its claim's token has
// completed already (processed, and no one claimed it since): a retry of a
// Complete whose response was lost, or that answered after its caller's
// deadline. It changes nothing, and the call succeeds (see alreadyDone).
var errCompleted = errors.New("completed already by this token")

// alreadyDone maps errCompleted to success.
func alreadyDone(err error) error {
	if errors.Is(err, errCompleted) {
		return nil
	}
	return err
}

// refuse is the refusal of a guarded change of c whose row is r (nil: none).
func refuse(op string, c ledger.Claim, r *ledger.Record) error {
	switch {
	case op == opComplete && r != nil && r.Token == c.Token && r.Status == ledger.Processed:
		return errCompleted
	case r == nil:
		return fmt.Errorf("%s %s/%s: %w", op, c.Bucket, c.Key, ledger.ErrNotFound)
	case r.Token != c.Token:
		return fmt.Errorf("%s %s/%s with token %d (current %d): %w", op, c.Bucket, c.Key, c.Token, r.Token, ledger.ErrSuperseded)
	default:
		return fmt.Errorf("%s %s/%s with token %d: %w", op, c.Bucket, c.Key, c.Token, ledger.ErrLeaseLost)
	}
}

// checkClaim is finishSQL's guard in Go: nil if r (nil: no row) is still
// claimed by c, with its lease running at now, else the refusal.
func checkClaim(op string, c ledger.Claim, r *ledger.Record, now time.Time) error {
	if r != nil && r.Token == c.Token && r.Status == ledger.Claimed && ms(r.LeaseUntil) >= ms(now) {
		return nil
	}
	return refuse(op, c, r)
}

// nowPlus marks an argument as "the transaction's now + this many ms".
type nowPlus int64

// Renew extends the claim's lease.
func (l *Backend) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	err := l.finish(ctx, opRenew, c, claimChange{
		apply: func(r *ledger.Record, now time.Time) { r.LeaseUntil = now.Add(lease) },
		set:   `lease_until = ?`, args: []any{nowPlus(lease.Milliseconds())},
	})
	if err == nil {
		c.LeaseUntil = time.Now().Add(lease) // approximate, for the caller's information
	}
	return c, err
}

// completeSet is Complete's update: processed, or pending again if newer work
// arrived while the claim ran.
const completeSet = `status = CASE WHEN gen = run_gen THEN 'processed' ELSE 'pending' END,
attempts = CASE WHEN gen = run_gen THEN attempts ELSE 0 END, result = ?, last_error = '', error_class = '', lease_until = 0, next_at = ?`

// Complete records the claim's work as processed (or, if newer work arrived
// while it ran, makes the record pending again).
//
// A Complete by a token of a record that token completed already succeeds
// and changes nothing: it is the retry of a Complete whose answer was lost.
func (l *Backend) Complete(ctx context.Context, c ledger.Claim, result string) error {
	return alreadyDone(l.finish(ctx, opComplete, c, completeChange(result)))
}

// completeChange is Complete's change of a row: completeRecord, completeSet.
func completeChange(result string) claimChange {
	return claimChange{
		apply: func(r *ledger.Record, now time.Time) { completeRecord(r, result, now) },
		set:   completeSet, args: []any{result, nowPlus(0)},
	}
}

// completeRecord is completeSet in Go.
func completeRecord(r *ledger.Record, result string, now time.Time) {
	if r.Gen == r.RunGen {
		r.Status = ledger.Processed
	} else {
		r.Status, r.Attempts = ledger.Pending, 0 // newer work arrived while it ran
	}
	r.Result, r.LastError, r.LeaseUntil, r.NextAttempt = result, "", time.Time{}, now
}

// CompleteBatch completes claims in one transaction (one commit, one fsync):
// it locks the rows in key order and runs one UPDATE … FROM over the batch (on
// PostgreSQL one statement does both);
// the claims it refuses are then explained one by one (lease lost,
// superseded, not found).
func (l *Backend) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	// Rows in key order, as everywhere, so concurrent batches cannot deadlock.
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return compareID(rowID{cs[a].Bucket, cs[a].Ident}, rowID{cs[b].Bucket, cs[b].Ident})
	})
	var errs []error
	err := l.inTx(ctx, opComplete, func(tx *sql.Tx, now time.Time) error {
		var err error
		errs, err = l.eng.completeBatch(ctx, tx, now, cs, results, order)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range errs {
		errs[i] = alreadyDone(errs[i])
	}
	return errs, nil
}

// Replay makes selected records pending again as an explicit replay.
func (l *Backend) Replay(ctx context.Context, sel ledger.Selection) (int, error) {
	where := ` WHERE status IN (`
	var a []any
	for i, st := range sel.Statuses {
		if i > 0 {
			where += `, `
		}
		where += `?`
		a = append(a, string(st))
	}
	where += `)`
	if sel.Bucket != "" {
		where += ` AND bucket = ?`
		a = append(a, sel.Bucket)
	}
	if sel.Key != "" {
		where += ` AND key = ?`
		a = append(a, sel.Key)
	}
	if sel.Prefix != "" {
		where += ` AND key >= ? AND key < ?`
		a = append(a, sel.Prefix, sel.Prefix+"\U0010FFFF")
	}
	if !sel.UpdatedSince.IsZero() {
		where += ` AND updated >= ?`
		a = append(a, ms(sel.UpdatedSince))
	}
	if sel.ErrorClass != "" {
		where += ` AND error_class = ?`
		a = append(a, driver.StoredClass(sel.ErrorClass))
	}
	if sel.DryRun {
		if err := l.eng.settle(ctx); err != nil {
			return 0, l.wrap("replay", err)
		}
		var n int
		table := `cairn_ledger`
		if sel.Bucket != "" && sel.Key != "" {
			table += ` ` + l.d.KeyIndexHint
		}
		err := l.db.QueryRowContext(ctx, l.q(`SELECT COUNT(*) FROM `+table+where), a...).Scan(&n)
		return n, l.wrap("replay", err)
	}
	table := `cairn_ledger`
	if sel.Bucket != "" && sel.Key != "" {
		// One key: its index (SQLite's planner otherwise scans the whole
		// bucket on the primary key, for every key replayed).
		table += ` ` + l.d.KeyIndexHint
	}
	set := `UPDATE ` + table + ` SET status = 'pending', attempts = 0, next_at = ?, updated = ?,
last_error = '', error_class = '', lease_until = 0, replays = replays + 1, gen = gen + 1, rev = rev + 1`
	q, lockFirst := set+where, false
	if l.d.LockRows != "" {
		lockFirst = true
		// Lock the selected rows in key order first (a plain UPDATE locks them
		// in scan order), and change only those.
		q = `WITH sel AS MATERIALIZED (SELECT bucket, ident FROM cairn_ledger` + where + ` ORDER BY bucket, ident ` + l.d.LockRows + `)
` + set + ` FROM sel WHERE cairn_ledger.bucket = sel.bucket AND cairn_ledger.ident = sel.ident`
	}
	var n int64
	err := l.inTx(ctx, "replay", func(tx *sql.Tx, now time.Time) error {
		args := append([]any{ms(now), ms(now)}, a...)
		if lockFirst { // the selection's arguments come first
			args = append(slices.Clone(a), ms(now), ms(now))
		}
		res, err := tx.ExecContext(ctx, l.q(q), args...)
		if err != nil {
			return l.wrap("replay", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// purgeBatch is how many rows one Purge transaction deletes.
const purgeBatch = 1000

// Purge deletes finished records last updated before olderThan, in key
// order, purgeBatch rows per transaction: a failure part way leaves the
// batches already committed deleted. On PostgreSQL the rows are locked in key
// order, like every statement that locks several rows, so it neither
// deadlocks with writers nor holds many locks for long. On SQLite the rows to
// delete are found by a read (the subquery), which goes through the
// memory-mapped file, and only they are read for writing: one DELETE with its
// WHERE read every row of the table for writing, through SQLite's page cache,
// which it filled to its limit whatever it deleted (cairn serve purges at
// start and hourly: with 200,000 records it then held 118 MB of anonymous
// memory, 18 MB with the purge reading), and it held the one writer's lock
// for the whole scan.
func (l *Backend) Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error) {
	where := ` WHERE updated < ? AND status IN ('processed'`
	if includeDead {
		where += `, 'failed', 'dead'`
	}
	where += `)`
	sel := `SELECT bucket, ident FROM cairn_ledger` + where + ` AND (bucket, ident) > (?, ?)
ORDER BY bucket, ident LIMIT ?`
	q := l.q(`DELETE FROM cairn_ledger WHERE (bucket, ident) IN (` + sel + `) RETURNING bucket, ident`)
	if l.d.LockRows != "" {
		q = l.q(`WITH sel AS MATERIALIZED (` + sel + ` ` + l.d.LockRows + `)
DELETE FROM cairn_ledger USING sel WHERE cairn_ledger.bucket = sel.bucket AND cairn_ledger.ident = sel.ident
RETURNING cairn_ledger.bucket, cairn_ledger.ident`)
	}
	total := 0
	var after rowID // the cursor: rows after it are left to purge
	for {
		var last rowID
		var n int
		err := l.inTx(ctx, "purge", func(tx *sql.Tx, _ time.Time) error {
			last, n = after, 0
			res, err := tx.QueryContext(ctx, q, ms(olderThan), after.bucket, after.ident, purgeBatch)
			if err != nil {
				return l.wrap("purge", err)
			}
			defer res.Close()
			for res.Next() {
				var id rowID
				if err := res.Scan(&id.bucket, &id.ident); err != nil {
					return l.wrap("purge", err)
				}
				n++
				if compareID(id, last) > 0 {
					last = id
				}
			}
			return l.wrap("purge", res.Err())
		})
		if err != nil {
			return total, err
		}
		total += n
		// Fewer than a batch: the locked scan found no more rows to delete
		// (rows changed meanwhile so that they no longer qualify are skipped).
		if n < purgeBatch {
			return total, nil
		}
		after = last
	}
}

// OldestPending reads the smallest pending-since off the work index.
func (l *Backend) OldestPending(ctx context.Context) (time.Time, error) {
	if err := l.eng.settle(ctx); err != nil {
		return time.Time{}, l.wrap("oldest pending", err)
	}
	var v sql.NullInt64
	err := l.db.QueryRowContext(ctx, `SELECT MIN(next_at) FROM cairn_ledger WHERE status = 'pending'`).Scan(&v)
	if err != nil || !v.Valid {
		return time.Time{}, l.wrap("oldest pending", err)
	}
	return fromMS(v.Int64), nil
}

// Ping checks that the database answers.
func (l *Backend) Ping(ctx context.Context) error { return l.wrap("ping", l.db.PingContext(ctx)) }

// Release gives the claim's work back without counting the attempt.
func (l *Backend) Release(ctx context.Context, c ledger.Claim) error {
	return l.finish(ctx, opRelease, c, claimChange{
		apply: driver.Release,
		set: `status = CASE WHEN attempts > 1 AND gen = run_gen THEN 'failed' ELSE 'pending' END,
attempts = CASE WHEN attempts > 0 AND gen = run_gen THEN attempts - 1 ELSE 0 END, lease_until = 0, next_at = ?`,
		args: []any{nowPlus(0)},
	})
}

// Fail records a failed attempt: retried after a backoff if retryable and
// attempts remain, else dead. If newer work arrived meanwhile, that work is
// pending instead.
func (l *Backend) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	status := ledger.Dead
	if retryable && c.Attempts < l.opts.MaxAttempts {
		status = ledger.Failed
	}
	retryIn := driver.Backoff(l.opts, c.Attempts)
	return l.finish(ctx, opFail, c, claimChange{
		apply: func(r *ledger.Record, now time.Time) {
			if r.Gen != r.RunGen {
				r.Status, r.Attempts, r.NextAttempt = ledger.Pending, 0, now // newer work arrived meanwhile
			} else {
				r.Status, r.NextAttempt = status, now.Add(retryIn)
			}
			r.LastError, r.LeaseUntil = cause, time.Time{}
		},
		set: `status = CASE WHEN gen <> run_gen THEN 'pending' ELSE CAST(? AS TEXT) END,
attempts = CASE WHEN gen <> run_gen THEN 0 ELSE attempts END,
next_at = CASE WHEN gen <> run_gen THEN CAST(? AS BIGINT) ELSE CAST(? AS BIGINT) END, last_error = ?, error_class = ?, lease_until = 0`,
		args: []any{string(status), nowPlus(0), nowPlus(retryIn.Milliseconds()), cause, driver.ErrorClass(cause)},
	})
}

// Lookup returns the newest record of each key (by sequencer, with
// EveryVersion) in one query.
func (l *Backend) Lookup(ctx context.Context, bucket string, keys []string) (map[string]ledger.Record, error) {
	if err := l.eng.settle(ctx); err != nil {
		return nil, l.wrap("lookup", err)
	}
	out := map[string]ledger.Record{}
	for start := 0; start < len(keys); start += 1000 {
		chunk := keys[start:min(start+1000, len(keys))]
		rows := make([][]any, len(chunk))
		for i, k := range chunk {
			rows[i] = []any{k}
		}
		from, a := l.d.Rows(rows, []string{"text"})
		res, err := l.db.QueryContext(ctx, l.q(`SELECT `+cols+` FROM cairn_ledger WHERE bucket = ? AND key IN (SELECT c1 FROM `+from+`)`),
			append([]any{bucket}, a...)...)
		if err != nil {
			return nil, l.wrap("lookup", err)
		}
		for res.Next() {
			c, err := scanRecord(res)
			if err != nil {
				res.Close()
				return nil, l.wrap("lookup", err)
			}
			if prev, ok := out[c.Key]; !ok || event.CompareSequencer(c.Seq, prev.Seq) > 0 {
				out[c.Key] = c.Record
			}
		}
		res.Close()
		if err := res.Err(); err != nil {
			return nil, l.wrap("lookup", err)
		}
	}
	return out, nil
}

// Get returns the records of one key (one, unless EveryVersion).
func (l *Backend) Get(ctx context.Context, bucket, key string) ([]ledger.Record, error) {
	if err := l.eng.settle(ctx); err != nil {
		return nil, l.wrap("get", err)
	}
	rows, err := l.db.QueryContext(ctx, l.q(`SELECT `+cols+` FROM cairn_ledger WHERE bucket = ? AND key = ? ORDER BY seq_sort, ident`), bucket, key)
	if err != nil {
		return nil, l.wrap("get", err)
	}
	defer rows.Close()
	var out []ledger.Record
	for rows.Next() {
		c, err := scanRecord(rows)
		if err != nil {
			return nil, l.wrap("get", err)
		}
		out = append(out, c.Record)
	}
	if len(out) == 0 && rows.Err() == nil {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ledger.ErrNotFound)
	}
	return out, l.wrap("get", rows.Err())
}

// List pages through records in (bucket, ident) order (Filter.ErrorClass
// too: see GroupErrors).
func (l *Backend) List(ctx context.Context, f ledger.Filter) ([]ledger.Claim, error) {
	if err := l.eng.settle(ctx); err != nil {
		return nil, l.wrap("list", err)
	}
	var q string
	var a []any
	switch {
	case f.Bucket != "" && f.AfterBucket > f.Bucket:
		return nil, nil // the cursor is past the bucket
	case f.Bucket != "" && f.AfterBucket == f.Bucket:
		// One bucket: a plain range on the primary key (or on the status
		// index: status first, below).
		q, a = `SELECT `+cols+` FROM cairn_ledger WHERE bucket = ? AND ident > ?`, []any{f.Bucket, f.AfterIdent}
	case f.Bucket != "":
		q, a = `SELECT `+cols+` FROM cairn_ledger WHERE bucket = ?`, []any{f.Bucket}
	default:
		// A row value, so that the database seeks to the cursor on the
		// primary key (an OR of the two reads every row before it again
		// on each page: a scan through the ledger was quadratic).
		q = `SELECT ` + cols + ` FROM cairn_ledger WHERE (bucket, ident) > (?, ?)`
		a = []any{f.AfterBucket, f.AfterIdent}
	}
	if f.Status != "" {
		q += ` AND status = ?`
		a = append(a, string(f.Status))
	}
	if f.ErrorClass != "" {
		// One class: a range of the class index, in this order.
		q += ` AND error_class = ?`
		a = append(a, driver.StoredClass(f.ErrorClass))
	}
	q, a = l.prefixWhere(q, a, f)
	q += ` ORDER BY bucket, ident LIMIT ?`
	a = append(a, f.Limit)
	if f.Prefix != "" && !l.opts.EveryVersion {
		// The page's keys first, off an index alone (every condition is on
		// its columns), then their rows: SQLite reads the row of each entry
		// a non-covering index scan meets before it tests the entry's
		// ident (a WITHOUT ROWID table has no deferred seek), which was
		// every dead letter of a page of dead letters under a prefix.
		q = `SELECT ` + cols + ` FROM cairn_ledger WHERE (bucket, ident) IN (` +
			strings.Replace(q, `SELECT `+cols+` FROM`, `SELECT bucket, ident FROM`, 1) + `) ORDER BY bucket, ident`
	}
	rows, err := l.db.QueryContext(ctx, l.q(q), a...)
	if err != nil {
		return nil, l.wrap("list", err)
	}
	defer rows.Close()
	var out []ledger.Claim
	for rows.Next() {
		c, err := scanRecord(rows)
		if err != nil {
			return nil, l.wrap("list", err)
		}
		out = append(out, c)
	}
	return out, l.wrap("list", rows.Err())
}

// Counts returns how many records have each status.
func (l *Backend) Counts(ctx context.Context) (ledger.Counts, error) {
	if err := l.eng.settle(ctx); err != nil {
		return nil, l.wrap("counts", err)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT status, COUNT(*) FROM cairn_ledger GROUP BY status`)
	if err != nil {
		return nil, l.wrap("counts", err)
	}
	defer rows.Close()
	out := ledger.Counts{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, l.wrap("counts", err)
		}
		out[ledger.Status(s)] = n
	}
	return out, l.wrap("counts", rows.Err())
}

// PutNote stores a note (ledger.NoteKeeper) in cairn_meta.
func (l *Backend) PutNote(ctx context.Context, name string, value []byte) error {
	return l.inTx(ctx, "put note", func(tx *sql.Tx, now time.Time) error {
		_, err := tx.ExecContext(ctx, l.q(`INSERT INTO cairn_meta (name, value, updated) VALUES (?, ?, ?)
 ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated = excluded.updated`), name, string(value), ms(now))
		return l.wrap("put note", err)
	})
}

// Note reads a note (ledger.NoteKeeper) from cairn_meta.
func (l *Backend) Note(ctx context.Context, name string) ([]byte, error) {
	var v string
	err := l.db.QueryRowContext(ctx, l.q(`SELECT value FROM cairn_meta WHERE name = ?`), name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, l.wrap("read note", err)
	}
	return []byte(v), nil
}
