// Package postgres is the intake ledger on PostgreSQL (pgx), for many workers on
// many machines sharing one ledger. Record is optimistic: it reads its keys
// without locks, decides, and writes each row only if the row's revision is
// unchanged (a key another worker changed meanwhile is decided again), so
// recorders do not wait on each other's row locks; Claim uses FOR UPDATE SKIP
// LOCKED so workers never block each other or need application locks; every
// statement that locks several rows locks them in key order, and a deadlock or
// serialization failure all the same is retried inside the ledger until the
// caller's ctx ends (see package sqlledger); lease expiry is judged by the
// database server's clock. Open it as postgres://user@host/db
// (pgx connection URLs; search_path=SCHEMA selects a schema).
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the driver

	"github.com/cairn-s3/cairn/internal/sqlschema"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
)

func init() {
	ledger.Register("postgres", func(ctx context.Context, raw string, opts *ledger.Options) (ledger.Backend, error) {
		return open(ctx, raw, opts)
	})
}

var migrations = []string{`CREATE TABLE cairn_ledger (
 bucket TEXT COLLATE "C" NOT NULL, ident TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL,
 version_id TEXT NOT NULL DEFAULT '', etag TEXT NOT NULL DEFAULT '', size BIGINT NOT NULL DEFAULT 0,
 kind TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', event_time BIGINT NOT NULL DEFAULT 0,
 seq TEXT NOT NULL DEFAULT '', seq_sort TEXT COLLATE "C" NOT NULL DEFAULT '', status TEXT NOT NULL,
 attempts INTEGER NOT NULL DEFAULT 0, token BIGINT NOT NULL DEFAULT 0, lease_until BIGINT NOT NULL DEFAULT 0,
 next_at BIGINT NOT NULL DEFAULT 0, first_seen BIGINT NOT NULL DEFAULT 0, updated BIGINT NOT NULL DEFAULT 0,
 seen INTEGER NOT NULL DEFAULT 0, stale INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '',
 result TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '', gen BIGINT NOT NULL DEFAULT 0,
 run_gen BIGINT NOT NULL DEFAULT 0, replays INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (bucket, ident))`,
	`CREATE INDEX cairn_ledger_work ON cairn_ledger (status, next_at)`,
	`CREATE INDEX cairn_ledger_key ON cairn_ledger (bucket, key)`,
	// Record (sqlledger) writes a row only if its revision is the one it read.
	// Placeholder rows of the row-locking protocol before it never outlive
	// their transaction; any left are dropped.
	`ALTER TABLE cairn_ledger ADD COLUMN rev BIGINT NOT NULL DEFAULT 0`,
	`DELETE FROM cairn_ledger WHERE status = 'init'`,
	// Room on each page for a new version of a row, so that a Record that
	// changes no indexed column (a coalesced pending key keeps its next_at;
	// duplicates, stale events) is a heap-only update, touching no index.
	`ALTER TABLE cairn_ledger SET (fillfactor = 75)`,
	// The accepted event's format, region and request IDs, handed back with
	// each claim ('' in rows written before; a constant default rewrites no
	// row).
	`ALTER TABLE cairn_ledger ADD COLUMN format TEXT NOT NULL DEFAULT '', ADD COLUMN region TEXT NOT NULL DEFAULT '',
 ADD COLUMN request_id TEXT NOT NULL DEFAULT '', ADD COLUMN host_id TEXT NOT NULL DEFAULT ''`,
	// Claim's expired-lease arm: the claimed rows whose lease ran out, oldest
	// expiry first. Off the work index it read every claimed row (and its heap
	// tuple, for lease_until) on every claim, so a claim cost O(live claims).
	// Partial: only claimed rows are in it (a few per handler slot).
	`CREATE INDEX cairn_ledger_lease ON cairn_ledger (lease_until) WHERE status = 'claimed'`,
	// List by status (the status page's dead letters, ledger ls --status):
	// seek to the cursor in the status's own order.
	sqlschema.StatusIndex,
	// Notes (ledger.NoteKeeper): the last audit's summary.
	sqlschema.MetaTable,
	// Each record's error class (driver.ErrorClass of last_error), so that
	// the status page groups and selects dead letters by class off an index
	// (sqlschema.ErrorClassIndex); sqlledger fills it in for the rows there.
	`ALTER TABLE cairn_ledger ADD COLUMN error_class TEXT COLLATE "C" NOT NULL DEFAULT ''`,
	sqlschema.ErrorClassIndex,
}

// errorClassAt is the schema version from which cairn_ledger has its error
// class column (sqlledger.Dialect.ErrorClassAt).
var errorClassAt = len(migrations) - 1

func rebind(q string) string {
	var sb strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			sb.WriteString("$" + strconv.Itoa(n))
			continue
		}
		sb.WriteByte(q[i])
	}
	return sb.String()
}

func classify(err error) error {
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w (is PostgreSQL running and the URL right?): %v", ledger.ErrUnavailable, err)
	}
	return err
}

// transient tells the errors after which a transaction may simply run again:
// deadlock_detected (40P01) and serialization_failure (40001). sqlledger
// retries those itself, so callers never see them for a transient conflict.
func transient(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// unnestRows passes a batch as one array per column, read with unnest.
func unnestRows(rows [][]any, types []string) (string, []any) {
	cols := make([][]any, len(types))
	for _, r := range rows {
		for i, v := range r {
			cols[i] = append(cols[i], v)
		}
	}
	var sb strings.Builder
	sb.WriteString("unnest(")
	args := make([]any, len(types))
	for i, t := range types {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("CAST(? AS " + t + "[])")
		switch t {
		case "bigint":
			a := make([]int64, len(rows))
			for j, v := range cols[i] {
				a[j] = toInt64(v)
			}
			args[i] = a
		default:
			a := make([]string, len(rows))
			for j, v := range cols[i] {
				a[j] = v.(string)
			}
			args[i] = a
		}
	}
	sb.WriteString(") AS t(")
	for i := range types {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "c%d", i+1)
	}
	sb.WriteString(")")
	return sb.String(), args
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	}
	panic(fmt.Sprintf("postgres: %T is not an integer column value", v))
}

// Open connects to the PostgreSQL database at url (postgres://user@host/db),
// creates or upgrades the ledger's tables in it (with Options.MustExist, only
// upgrades them: a database without them is ledger.ErrNoLedger), and returns
// the ledger.
func Open(ctx context.Context, url string, opts *ledger.Options) (*ledger.Ledger, error) {
	b, err := open(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	return ledger.New(b), nil
}

// open connects and migrates the schema.
func open(ctx context.Context, url string, opts *ledger.Options) (*sqlledger.Backend, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ledger.ErrInvalidURL, err)
	}
	db.SetMaxOpenConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledger: connecting to PostgreSQL: %w", classify(err))
	}
	l, err := sqlledger.New(ctx, db, sqlledger.Dialect{
		Name: "postgres", Rebind: rebind, SkipLocked: "FOR UPDATE SKIP LOCKED",
		ServerNow: `SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint`,
		Rows:      unnestRows, BatchUpsert: true, Migrations: migrations, Classify: classify, ErrorClassAt: errorClassAt,
		MigrationLock: `SELECT pg_advisory_xact_lock(727272)`,
		LockRows:      "FOR UPDATE", Transient: transient,
	}, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}
