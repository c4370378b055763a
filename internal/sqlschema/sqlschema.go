// Package sqlschema is the text of the SQL intake ledger's table and of the
// statements that write it: the SQLite schema's migrations, the columns in
// the order rows are written, the guarded upsert and the row sources it
// reads from. It imports nothing but the standard library, so that the SQL
// ledger (ledger/internal/sqlledger, ledger/sqlite) and the SQLite-drivers
// benchmark, a module of its own, run the same SQL from one source.
package sqlschema

import (
	"fmt"
	"strings"
)

// SQLiteMigrations are the SQLite schema's migrations of cairn_ledger, in
// order (ledger/sqlite appends the intake log's table after them).
var SQLiteMigrations = []string{`CREATE TABLE cairn_ledger (
 bucket TEXT NOT NULL, ident TEXT NOT NULL, key TEXT NOT NULL, version_id TEXT NOT NULL DEFAULT '', etag TEXT NOT NULL DEFAULT '',
 size INTEGER NOT NULL DEFAULT 0, kind TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', event_time INTEGER NOT NULL DEFAULT 0,
 seq TEXT NOT NULL DEFAULT '', seq_sort TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
 token INTEGER NOT NULL DEFAULT 0, lease_until INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL DEFAULT 0,
 first_seen INTEGER NOT NULL DEFAULT 0, updated INTEGER NOT NULL DEFAULT 0, seen INTEGER NOT NULL DEFAULT 0,
 stale INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '', result TEXT NOT NULL DEFAULT '',
 source TEXT NOT NULL DEFAULT '', gen INTEGER NOT NULL DEFAULT 0, run_gen INTEGER NOT NULL DEFAULT 0,
 replays INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (bucket, ident)) WITHOUT ROWID`,
	`CREATE INDEX cairn_ledger_work ON cairn_ledger (status, next_at)`,
	`CREATE INDEX cairn_ledger_key ON cairn_ledger (bucket, key)`,
	// Record (sqlledger) writes a row only if its revision is the one it read.
	`ALTER TABLE cairn_ledger ADD COLUMN rev INTEGER NOT NULL DEFAULT 0`,
	// The accepted event's format, region and request IDs, handed back with
	// each claim ('' in rows written before).
	`ALTER TABLE cairn_ledger ADD COLUMN format TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE cairn_ledger ADD COLUMN region TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE cairn_ledger ADD COLUMN request_id TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE cairn_ledger ADD COLUMN host_id TEXT NOT NULL DEFAULT ''`,
}

// StatusIndex orders each status's records as List pages through them, so
// that a page of one status (the status page's dead letters, cairn ledger ls
// --status dead) seeks to its cursor instead of sorting every record of the
// status on each page. Both SQL backends add it as their latest migration.
const StatusIndex = `CREATE INDEX cairn_ledger_status ON cairn_ledger (status, bucket, ident)`

// MetaTable keeps the ledger's notes (ledger.NoteKeeper: the last audit's
// summary), one row per name; updated is unix ms by the database's clock.
const MetaTable = `CREATE TABLE cairn_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL, updated BIGINT NOT NULL)`

// ErrorClassColumn adds the error class column: ledger.ErrorClass of the row's
// last_error, empty for none (driver.ErrorClass), written with it, so the
// status page groups and selects dead letters by class in a query
// (ErrorClassIndex) instead of reading every one. ledger/sqlite adds it
// after StatusIndex (its migrations fold an intake log of rows without it
// first: LogFoldV1).
const ErrorClassColumn = `ALTER TABLE cairn_ledger ADD COLUMN error_class TEXT NOT NULL DEFAULT ''`

// ErrorClassIndex orders each status's records by class, then as List pages
// through them: a GROUP BY over the dead letters reads this index alone, and
// a class's records (a page of them from a cursor, or a group's first few)
// are one range of it.
const ErrorClassIndex = `CREATE INDEX cairn_ledger_class ON cairn_ledger (status, error_class, bucket, ident, updated)`

// colsV1 are the columns before error_class, the images an intake log
// written before ErrorClassColumn holds (then rev).
const colsV1 = `bucket, ident, key, version_id, etag, size, kind, name, event_time, seq, seq_sort, status, attempts, token,
lease_until, next_at, first_seen, updated, seen, stale, last_error, result, source, gen, run_gen, replays,
format, region, request_id, host_id`

// Cols are the ledger's columns in the order rows are written and read; rev
// follows them.
const Cols = colsV1 + `, error_class`

// ColTypes are the SQL types of Cols and rev, one a column.
var ColTypes = []string{"text", "text", "text", "text", "text", "bigint", "text", "text", "bigint", "text", "text", "text", "bigint",
	"bigint", "bigint", "bigint", "bigint", "bigint", "bigint", "bigint", "text", "text", "text", "bigint", "bigint", "bigint",
	"text", "text", "text", "text", "text", "bigint"}

// UpsertHead inserts the columns c1..c32 of a row source (Cols, then rev).
const UpsertHead = `INSERT INTO cairn_ledger (` + Cols + `, rev)
SELECT c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27,
c28, c29, c30, c31, c32`

// UpsertFrom (a format: %s is the row source) writes rows whose revision is
// still the one Record read: a new row is inserted with rev 1 (and refused if
// another writer inserted the key first), an existing row is updated only if
// its rev is one less than the row's new rev. Rows are written in the order
// of the row source (key order).
const UpsertFrom = UpsertHead + `
FROM %s WHERE true` + OnConflictSet + `
WHERE cairn_ledger.rev = excluded.rev - 1`

// onConflictSetV1 is an upsert's conflict clause over colsV1.
const onConflictSetV1 = `
ON CONFLICT (bucket, ident) DO UPDATE SET version_id=excluded.version_id, etag=excluded.etag, size=excluded.size,
kind=excluded.kind, name=excluded.name, event_time=excluded.event_time, seq=excluded.seq, seq_sort=excluded.seq_sort,
status=excluded.status, attempts=excluded.attempts, token=excluded.token, lease_until=excluded.lease_until, next_at=excluded.next_at,
first_seen=excluded.first_seen, updated=excluded.updated, seen=excluded.seen, stale=excluded.stale, last_error=excluded.last_error,
result=excluded.result, source=excluded.source, gen=excluded.gen, run_gen=excluded.run_gen, replays=excluded.replays,
format=excluded.format, region=excluded.region, request_id=excluded.request_id, host_id=excluded.host_id, rev=excluded.rev`

// OnConflictSet is an upsert's conflict clause: every column but the key
// from the row offered (each upsert adds its WHERE guard).
const OnConflictSet = onConflictSetV1 + `, error_class=excluded.error_class`

// LogFoldV1 folds an intake log of images written before ErrorClassColumn
// (colsV1, then rev: 31 values each) into cairn_ledger, each over an older
// revision only, as the intake log's own fold does: the SQLite migration
// that adds the column runs it first, and then empties the log, so that no
// image of the old shape is ever read as one of the new.
const LogFoldV1 = `INSERT INTO cairn_ledger (` + colsV1 + `, rev)
SELECT j.value->>0, j.value->>1, j.value->>2, j.value->>3, j.value->>4, j.value->>5, j.value->>6, j.value->>7, j.value->>8, j.value->>9,
j.value->>10, j.value->>11, j.value->>12, j.value->>13, j.value->>14, j.value->>15, j.value->>16, j.value->>17, j.value->>18, j.value->>19,
j.value->>20, j.value->>21, j.value->>22, j.value->>23, j.value->>24, j.value->>25, j.value->>26, j.value->>27, j.value->>28, j.value->>29,
j.value->>30 FROM cairn_intake_log g, jsonb_each(jsonb(g.images)) j WHERE true` + onConflictSetV1 + `
WHERE cairn_ledger.rev < excluded.rev`

// UpsertSizes are the row counts of the prepared multi-row upserts (where a
// dialect does not write a batch in one statement), largest first.
var UpsertSizes = []int{64, 8, 1}

// ValuesFrom is a row source with columns c1..cols over len(rows) rows of
// placeholders, and its arguments (the rows' values in order).
func ValuesFrom(rows [][]any, cols int) (string, []any) {
	var sb strings.Builder
	sb.WriteString("(SELECT ")
	for i := range cols {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "column%d AS c%d", i+1, i+1)
	}
	sb.WriteString(" FROM (VALUES ")
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	args := make([]any, 0, len(rows)*cols)
	for i, r := range rows {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(one)
		args = append(args, r...)
	}
	sb.WriteString("))")
	return sb.String(), args
}

// JSONEachFrom is SQLite's row source with columns c1..cols read with
// json_each from one argument: a JSON array of rows, each an array of values.
func JSONEachFrom(cols int) string {
	var sb strings.Builder
	sb.WriteString("(SELECT ")
	for i := range cols {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "value->>%d AS c%d", i, i+1)
	}
	sb.WriteString(" FROM json_each(?))")
	return sb.String()
}
