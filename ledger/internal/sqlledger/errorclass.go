package sqlledger

import (
	"context"
	"database/sql"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// The error class column: every row write stores driver.ErrorClass of the
// row's last_error beside it (columns, Fail's SET clause; Complete and Replay
// clear both), so that grouping the dead letters by class is one GROUP BY
// off the class index (status, error_class, bucket, ident, updated), and a
// class's records are one range of it, in List's order.

var _ ledger.ErrorGrouper = (*Backend)(nil)

// backfillPage is how many rows backfillClasses reads at a time.
const backfillPage = 1000

// backfillClasses fills in error_class for the rows a migration from a
// schema without it found, in the migration's transaction: one pass over
// the table in key order, writing the rows that have an error (most have
// none). Revisions are not bumped: no process caches rows yet.
func (l *Backend) backfillClasses(ctx context.Context, tx *sql.Tx) error {
	var after rowID
	read := l.q(`SELECT bucket, ident, last_error FROM cairn_ledger WHERE (bucket, ident) > (?, ?) ORDER BY bucket, ident LIMIT ?`)
	write := l.q(`UPDATE cairn_ledger SET error_class = ? WHERE bucket = ? AND ident = ?`)
	for {
		rows, err := tx.QueryContext(ctx, read, after.bucket, after.ident, backfillPage)
		if err != nil {
			return err
		}
		type change struct {
			id    rowID
			class string
		}
		var changes []change
		n := 0
		for rows.Next() {
			var msg string
			if err := rows.Scan(&after.bucket, &after.ident, &msg); err != nil {
				rows.Close()
				return err
			}
			n++
			if c := driver.ErrorClass(msg); c != "" {
				changes = append(changes, change{after, c})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range changes {
			if _, err := tx.ExecContext(ctx, write, c.class, c.id.bucket, c.id.ident); err != nil {
				return err
			}
		}
		if n < backfillPage {
			return nil
		}
	}
}

// filterWhere is the WHERE clause (and its arguments) of the records f
// selects, its cursor and limit aside: status, error class, bucket, key
// prefix and last key (see prefixWhere).
func (l *Backend) filterWhere(f ledger.Filter) (string, []any) {
	where, a := ` WHERE true`, []any(nil)
	if f.Status != "" {
		where += ` AND status = ?`
		a = append(a, string(f.Status))
	}
	if f.ErrorClass != "" {
		where += ` AND error_class = ?`
		a = append(a, driver.StoredClass(f.ErrorClass))
	}
	if f.Bucket != "" {
		where += ` AND bucket = ?`
		a = append(a, f.Bucket)
	}
	return l.prefixWhere(where, a, f)
}

// prefixWhere adds f's Prefix and Through to where. Unless the ledger keys
// work per version, a row's ident is its key, and the condition is on ident
// alone: every index holds ident (the status and class indexes after the
// bucket, so a page of one bucket seeks to the prefix), and a page of every
// bucket reads the status's index entries, never the rows (on the key it
// read the row of every dead letter: 0.4 s a page at 50,000). Per version,
// ident begins with the key (and the version id follows), so the range of
// ident holds every key of the prefix, and the key is checked on the row.
// Through (an exact key, within a prefix of it) is checked on the key.
func (l *Backend) prefixWhere(where string, a []any, f ledger.Filter) (string, []any) {
	if f.Prefix != "" {
		where += ` AND ident >= ? AND ident < ?`
		a = append(a, f.Prefix, f.Prefix+"\U0010FFFF")
		if l.opts.EveryVersion {
			where += ` AND key >= ? AND key < ?`
			a = append(a, f.Prefix, f.Prefix+"\U0010FFFF")
		}
	}
	if f.Through != "" {
		where += ` AND key <= ?`
		a = append(a, f.Through)
	}
	return where, a
}

// GroupErrors groups the records f selects by their stored class in one
// query (the counts, the first and last update, how many classes and
// records in all), then reads each listed class's first examples records
// off the class index.
func (l *Backend) GroupErrors(ctx context.Context, f ledger.Filter, limit, examples int) (ledger.ErrorGroups, error) {
	var out ledger.ErrorGroups
	if err := l.eng.settle(ctx); err != nil {
		return out, l.wrap("group errors", err)
	}
	where, a := l.filterWhere(f)
	rows, err := l.db.QueryContext(ctx, l.q(`SELECT error_class, COUNT(*), MIN(updated), MAX(updated), COUNT(*) OVER (), CAST(SUM(COUNT(*)) OVER () AS BIGINT)
FROM cairn_ledger`+where+` GROUP BY error_class ORDER BY COUNT(*) DESC, error_class LIMIT ?`), append(a, limit)...)
	if err != nil {
		return out, l.wrap("group errors", err)
	}
	for rows.Next() {
		var g ledger.ErrorGroup
		var first, last int64
		if err := rows.Scan(&g.Class, &g.Count, &first, &last, &out.Classes, &out.Total); err != nil {
			rows.Close()
			return out, l.wrap("group errors", err)
		}
		g.First, g.Last = fromMS(first), fromMS(last)
		out.Groups = append(out.Groups, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, l.wrap("group errors", err)
	}
	if examples > 0 {
		// Keys first, off the class index alone, then their rows (see List).
		q := l.q(`SELECT bucket, key FROM cairn_ledger WHERE (bucket, ident) IN (SELECT bucket, ident FROM cairn_ledger` + where +
			` AND error_class = ? ORDER BY bucket, ident LIMIT ?) ORDER BY bucket, ident`)
		for i := range out.Groups {
			g := &out.Groups[i]
			res, err := l.db.QueryContext(ctx, q, append(a[:len(a):len(a)], g.Class, examples)...)
			if err != nil {
				return out, l.wrap("group errors", err)
			}
			for res.Next() {
				var k ledger.ExampleKey
				if err := res.Scan(&k.Bucket, &k.Key); err != nil {
					res.Close()
					return out, l.wrap("group errors", err)
				}
				g.Examples = append(g.Examples, k)
			}
			res.Close()
			if err := res.Err(); err != nil {
				return out, l.wrap("group errors", err)
			}
		}
	}
	for i := range out.Groups {
		out.Groups[i].Class = driver.ShownClass(out.Groups[i].Class)
	}
	ledger.SortErrorGroups(out.Groups) // NoError is "" in the query's order
	return out, nil
}
