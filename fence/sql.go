package fence

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Dialect is the SQL dialect a statement is built for.
type Dialect int

const (
	// Postgres numbers parameters $1, $2, … (PostgreSQL 9.5 or later).
	Postgres Dialect = iota
	// SQLite numbers parameters ?1, ?2, … (SQLite 3.24 or later).
	SQLite
)

func (d Dialect) param(n int) string {
	if d == SQLite {
		return fmt.Sprintf("?%d", n)
	}
	return fmt.Sprintf("$%d", n)
}

// The SQL pattern. A fenced table keeps the token beside each row:
//
//	CREATE TABLE outputs (
//	    key         TEXT PRIMARY KEY,
//	    fence_token BIGINT NOT NULL,
//	    value       TEXT NOT NULL        -- the caller's columns
//	);
//
// and every write is conditional on it, in the same statement, so the
// database judges and writes atomically:
//
//	INSERT INTO outputs (key, fence_token, value) VALUES ($1, $2, $3)
//	ON CONFLICT (key) DO UPDATE SET fence_token = excluded.fence_token, value = excluded.value
//	WHERE excluded.fence_token >= outputs.fence_token
//
// A stale writer's statement changes no row (RowsAffected is 0): SQLExec
// turns that into ErrStale. Deletes must keep the token too: set a deleted
// flag (or NULL the columns) with the same condition instead of DELETE. Inside
// a larger transaction, run the fenced statement first and roll back on
// ErrStale, so nothing the transaction did commits for a stale writer.

// SQLUpsert returns the fenced upsert statement for table, whose primary key
// (or unique) column is keyCol and whose token column is tokenCol, writing
// cols. Its parameters are, in order: key, token, then one per column of
// cols. Names must be plain identifiers ([A-Za-z_][A-Za-z0-9_]*).
func SQLUpsert(d Dialect, table, keyCol, tokenCol string, cols ...string) (string, error) {
	if err := identifiers(append([]string{table, keyCol, tokenCol}, cols...)); err != nil {
		return "", err
	}
	names := append([]string{keyCol, tokenCol}, cols...)
	params := make([]string, len(names))
	for i := range names {
		params[i] = d.param(i + 1)
	}
	set := []string{tokenCol + " = excluded." + tokenCol}
	for _, c := range cols {
		set = append(set, c+" = excluded."+c)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s WHERE excluded.%s >= %s.%s",
		table, strings.Join(names, ", "), strings.Join(params, ", "), keyCol, strings.Join(set, ", "), tokenCol, table, tokenCol), nil
}

// SQLUpdate returns the fenced update of an existing row: the same parameters
// as SQLUpsert (key, token, then cols), changing a row only while its token is
// at most the writer's. A missing row is not created (SQLExec reports it as
// ErrStale too: use SQLUpsert when the row may be missing).
func SQLUpdate(d Dialect, table, keyCol, tokenCol string, cols ...string) (string, error) {
	if err := identifiers(append([]string{table, keyCol, tokenCol}, cols...)); err != nil {
		return "", err
	}
	set := []string{tokenCol + " = " + d.param(2)}
	for i, c := range cols {
		set = append(set, c+" = "+d.param(i+3))
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s = %s AND %s <= %s",
		table, strings.Join(set, ", "), keyCol, d.param(1), tokenCol, d.param(2)), nil
}

// Execer is *sql.DB, *sql.Tx or *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQLExec runs a statement from SQLUpsert or SQLUpdate with key, token and
// the columns' values, and returns a *StaleError (ErrStale) if it changed no
// row: a higher token has written that row.
func SQLExec(ctx context.Context, db Execer, query string, key any, token int64, values ...any) error {
	if token < 0 {
		return fmt.Errorf("fence: token %d for %v is negative; pass the token your lock handed out: %w", token, key, ErrInvalidArgument)
	}
	res, err := db.ExecContext(ctx, query, append([]any{key, token}, values...)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: the driver cannot tell whether the fenced statement changed a row: %w", err)
	}
	if n == 0 {
		return &StaleError{Key: fmt.Sprint(key), Token: token, Highest: -1}
	}
	return nil
}

func identifiers(names []string) error {
	for _, n := range names {
		ok := n != ""
		for i, r := range n {
			if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
				ok = false
			}
		}
		if !ok {
			return fmt.Errorf("fence: %q is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*); quote-free names only: %w", n, ErrInvalidArgument)
		}
	}
	return nil
}
