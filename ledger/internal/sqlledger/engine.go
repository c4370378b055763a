package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// engine is how a Backend runs its writing transactions and reads and
// changes rows inside them. The operations (Record, Claim, Complete, …) are
// written once over it, with the ledger's rules (driver.Decide,
// driver.Release, claimed, completeRecord, …) passed to it; New picks one of
// two engines, once:
//
//   - sqlEngine (PostgreSQL): each call is one transaction of its own on the
//     pool; rows are read from and written to cairn_ledger, and a claim is
//     taken or ended by one guarded statement, so that many workers on many
//     machines can share the table (see the lock order in the package doc).
//   - logEngine (SQLite, Dialect.IntakeLog): the process holding the writer
//     decides from its cache of rows and appends their new images to the
//     intake log, folded into cairn_ledger later (intakelog.go); its
//     transactions are group-committed on one connection (group.go).
type engine interface {
	// tryTx runs fn once in one transaction, with the transaction's time,
	// and commits (Backend.inTx runs it again after a transient conflict).
	tryTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) error
	// settle makes everything recorded visible to a statement on
	// cairn_ledger outside tryTx: what Backend's reads call first.
	settle(ctx context.Context) error
	// load reads the rows of ids and their revisions (no locks: write
	// checks the revisions); a row missing from the answer does not exist.
	load(ctx context.Context, tx *sql.Tx, ids []rowID) (map[rowID]row, error)
	// write writes changed rows, each only if its revision is still the one
	// before (r.rev - 1), and returns those written.
	write(ctx context.Context, tx *sql.Tx, changed map[rowID]*row) (map[rowID]bool, error)
	// claimsAsRecorded tells whether a Record that also claims may write
	// the work its batch makes pending claimed at once, in the same write
	// (see Backend.RecordAndClaim), rather than record and then claim.
	claimsAsRecorded(ctx context.Context, tx *sql.Tx, now time.Time) (bool, error)
	// claim claims up to n records of work due at now (Backend.Claim's
	// rule), in any order.
	claim(ctx context.Context, tx *sql.Tx, now time.Time, n int, lease time.Duration) ([]ledger.Claim, error)
	// changeClaim makes ch to c's row if the row is still claimed by c's
	// token with its lease running at now, else returns the refusal (see
	// refuse), which leaves tx usable.
	changeClaim(ctx context.Context, tx *sql.Tx, now time.Time, op string, c ledger.Claim, ch claimChange) error
	// completeBatch completes cs (order: their indexes in key order) as
	// changeClaim would each with completeChange, and returns each claim's
	// refusal (nil: completed).
	completeBatch(ctx context.Context, tx *sql.Tx, now time.Time, cs []ledger.Claim, results []string, order []int) ([]error, error)
	// close ends the engine's work before the database closes.
	close()
}

// claimChange is one guarded change of a claimed row (Complete, Renew,
// Fail, Release) in both the forms the engines run, side by side so that
// they stay one rule: apply changes the record in Go (logEngine, on its
// cached row), set is the same change as the SET clause of finishSQL, with
// args (a nowPlus argument is the transaction's time plus that many ms).
type claimChange struct {
	apply func(r *ledger.Record, now time.Time)
	set   string
	args  []any
}

// sqlEngine runs each call as a transaction of its own on the pool, with the
// rows in cairn_ledger (PostgreSQL).
type sqlEngine struct{ *Backend }

// tryTx runs fn in a transaction of its own on the pool.
func (l sqlEngine) tryTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.wrap(op, err)
	}
	defer tx.Rollback()
	now, err := l.now(ctx, tx)
	if err != nil {
		return abandoned(ctx, tx, l.wrap(op, err))
	}
	if err := fn(tx, now); err != nil {
		return abandoned(ctx, tx, err)
	}
	return l.wrap(op, commit(ctx, tx))
}

func (sqlEngine) settle(context.Context) error { return nil }

func (sqlEngine) close() {}

func (l sqlEngine) load(ctx context.Context, tx *sql.Tx, ids []rowID) (map[rowID]row, error) {
	return l.loadTable(ctx, tx, ids)
}

// write upserts the rows (upsert's guard compares revisions).
func (l sqlEngine) write(ctx context.Context, tx *sql.Tx, changed map[rowID]*row) (map[rowID]bool, error) {
	return l.upsert(ctx, tx, l.images(changed))
}

// workDueSQL tells whether any work is due: Claim's candidates, pending and
// failed work off the work index (status, next_at), expired leases off the
// lease index (lease_until, claimed rows only), as Claim looks for them (an
// EXISTS may be planned as a scan of the table when claimed rows are many).
const workDueSQL = `SELECT EXISTS (SELECT 1 FROM cairn_ledger WHERE status = 'pending' AND next_at <= ?)
OR EXISTS (SELECT 1 FROM cairn_ledger WHERE status = 'failed' AND next_at <= ?)
OR (SELECT 1 FROM cairn_ledger WHERE status = 'claimed' AND lease_until < ? ORDER BY lease_until LIMIT 1) IS NOT NULL`

// claimsAsRecorded: a claim statement after the upsert would write each new
// row twice. So a probe first asks whether any work is due at all
// (workDueSQL); when none is, Claim right after the record would take the
// rows the batch made pending, and the upsert writes them claimed at once.
func (l sqlEngine) claimsAsRecorded(ctx context.Context, tx *sql.Tx, now time.Time) (bool, error) {
	nowMS := ms(now)
	var due bool
	if err := tx.QueryRowContext(ctx, l.q(workDueSQL), nowMS, nowMS, nowMS).Scan(&due); err != nil {
		return false, l.wrap("record", err)
	}
	return !due, nil
}

func (l sqlEngine) claim(ctx context.Context, tx *sql.Tx, now time.Time, n int, lease time.Duration) ([]ledger.Claim, error) {
	return l.claimTx(ctx, tx, now, n, lease)
}

// changeClaim runs ch's guarded UPDATE of c's row and explains a refusal.
func (l sqlEngine) changeClaim(ctx context.Context, tx *sql.Tx, now time.Time, op string, c ledger.Claim, ch claimChange) error {
	a := append([]any{}, ch.args...)
	for i, v := range a {
		if _, ok := v.(nowPlus); ok {
			a[i] = ms(now) + int64(v.(nowPlus))
		}
	}
	a = append(a, ms(now), c.Bucket, c.Ident, c.Token, ms(now))
	res, err := tx.ExecContext(ctx, finishSQL(l.Backend, ch.set), a...)
	if err != nil {
		return l.wrap(op, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return l.refusal(ctx, tx, op, c)
}

// finishSQL is the guarded update changeClaim runs: set (a claimChange's)
// where the row is still claimed by the token, its lease running.
func finishSQL(l *Backend, set string) string {
	return l.q(`UPDATE cairn_ledger SET ` + set + `, updated = ?, rev = rev + 1
WHERE bucket = ? AND ident = ? AND token = ? AND status = 'claimed' AND lease_until >= ?`)
}

// refusal explains why a guarded update of c changed nothing.
func (l sqlEngine) refusal(ctx context.Context, tx *sql.Tx, op string, c ledger.Claim) error {
	var token int64
	var status string
	err := tx.QueryRowContext(ctx, l.q(`SELECT token, status FROM cairn_ledger WHERE bucket = ? AND ident = ?`), c.Bucket, c.Ident).Scan(&token, &status)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return refuse(op, c, nil)
	case err != nil:
		return l.wrap(op, err)
	}
	return refuse(op, c, &ledger.Record{Token: token, Status: ledger.Status(status)})
}

// completeBatch locks the claims' rows in key order and completes them with
// one UPDATE … FROM per valuesRows claims; the claims it refused are then
// explained one by one.
func (l sqlEngine) completeBatch(ctx context.Context, tx *sql.Tx, now time.Time, cs []ledger.Claim, results []string, order []int) ([]error, error) {
	errs := make([]error, len(cs))
	done := map[rowID]bool{}
	for start := 0; start < len(order); start += valuesRows {
		chunk := order[start:min(start+valuesRows, len(order))]
		rows := make([][]any, len(chunk))
		for j, i := range chunk {
			rows[j] = []any{cs[i].Bucket, cs[i].Ident, cs[i].Token, results[i]}
		}
		var from string
		var fa []any
		if l.d.BatchUpsert {
			from, fa = l.d.Rows(rows, []string{"text", "text", "bigint", "text"})
		} else {
			from, fa = valuesFrom(rows, 4)
			from += " AS t"
		}
		args := append([]any{ms(now), ms(now)}, fa...)
		args = append(args, ms(now))
		q := `UPDATE cairn_ledger SET status = CASE WHEN gen = run_gen THEN 'processed' ELSE 'pending' END,
attempts = CASE WHEN gen = run_gen THEN attempts ELSE 0 END, result = t.c4, last_error = '', error_class = '', lease_until = 0, next_at = ?, updated = ?, rev = cairn_ledger.rev + 1
FROM ` + from + `
WHERE cairn_ledger.bucket = t.c1 AND cairn_ledger.ident = t.c2 AND cairn_ledger.token = t.c3
  AND cairn_ledger.status = 'claimed' AND cairn_ledger.lease_until >= ?
RETURNING cairn_ledger.bucket, cairn_ledger.ident`
		if l.d.LockRows != "" {
			// An UPDATE … FROM a list locks rows in the order of the join the
			// planner picks (a hash join: the table's physical order), not in
			// the order of the list: k locks them first, in key order, each
			// row beside its claim. The claim's checks read k's locked rows:
			// checked on the table, status = 'claimed' can make the planner
			// hash-join every claimed row (and every dead index entry of one);
			// and k carries the list's columns, as a join of k with the list
			// again is a nested loop, quadratic in the batch, in the generic
			// plan of the prepared statement. The update finds each row by
			// bucket, key and ident, so that either index finds it at once:
			// with stale statistics (a young table) the planner looked
			// (bucket, ident) up through the (bucket, key) index, reading the
			// whole bucket for each row (seconds a batch).
			for j, i := range chunk {
				rows[j] = append(rows[j], cs[i].Key)
			}
			from, fa = l.d.Rows(rows, []string{"text", "text", "bigint", "text", "text"})
			q = `WITH k AS MATERIALIZED (SELECT l.bucket, l.key, l.ident, l.token, l.status, l.lease_until, t.c3, t.c4
  FROM ` + from + ` JOIN cairn_ledger l ON l.bucket = t.c1 AND l.key = t.c5 AND l.ident = t.c2
  ORDER BY l.bucket, l.ident ` + l.d.LockRows + ` OF l)
UPDATE cairn_ledger SET status = CASE WHEN gen = run_gen THEN 'processed' ELSE 'pending' END,
attempts = CASE WHEN gen = run_gen THEN attempts ELSE 0 END, result = k.c4, last_error = '', error_class = '', lease_until = 0, next_at = ?, updated = ?, rev = cairn_ledger.rev + 1
FROM k
WHERE cairn_ledger.bucket = k.bucket AND cairn_ledger.key = k.key AND cairn_ledger.ident = k.ident
  AND k.token = k.c3 AND k.status = 'claimed' AND k.lease_until >= ?
RETURNING cairn_ledger.bucket, cairn_ledger.ident`
			args = append(append(fa, ms(now), ms(now)), ms(now))
		}
		res, err := tx.QueryContext(ctx, l.q(q), args...)
		if err != nil {
			return nil, l.wrap("complete", err)
		}
		for res.Next() {
			var id rowID
			if err := res.Scan(&id.bucket, &id.ident); err != nil {
				res.Close()
				return nil, l.wrap("complete", err)
			}
			done[id] = true
		}
		res.Close()
		if err := res.Err(); err != nil {
			return nil, l.wrap("complete", err)
		}
	}
	for i, c := range cs {
		if !done[rowID{c.Bucket, c.Ident}] {
			errs[i] = l.refusal(ctx, tx, opComplete, c)
			if !refused(errs[i]) {
				return nil, errs[i]
			}
		}
	}
	return errs, nil
}
