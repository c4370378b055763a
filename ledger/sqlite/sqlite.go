// Package sqlite is the embedded intake ledger: one SQLite file in WAL mode with
// synchronous=FULL (a Record that returned is on disk), pure Go (modernc.org/sqlite,
// no cgo). Writers are serialised by BEGIN IMMEDIATE; several processes may share
// the file on one machine (a writer waits up to 30 s for another process's
// transaction, then its transaction is run again until its ctx ends). Open it as sqlite:///abs/path.db or a plain path;
// sqlite:///abs/path.db?synchronous=normal trades the durability of the last
// commits on a power loss (not on a crash of cairn) for no fsync per commit:
// for a throwaway ledger, such as cairn demo's.
//
// A Record batch is not written row by row: its decided rows go, as one JSON
// array, into an intake log table in the same transaction, and the process
// keeps them in memory to decide the next batches; the log is folded into
// the ledger's table when it grows past its bounds, before any other kind of
// write, and before any read (see ledger/internal/sqlledger, intakelog.go).
// A key changed many times between folds is written once, which is what lets
// the pure-Go driver decide 100k+ events/s (each row write costs it ~12 µs).
// data_version tells a process when another one wrote, so sharing a file
// between processes stays correct.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"modernc.org/sqlite" // the driver

	"github.com/cairn-s3/cairn/internal/sqlschema"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
)

func init() {
	ledger.Register("sqlite", func(ctx context.Context, raw string, opts *ledger.Options) (ledger.Backend, error) {
		u, err := url.Parse(raw)
		if err != nil || u.Path == "" {
			return nil, fmt.Errorf("%w: %q: use sqlite:///abs/path.db or a plain path", ledger.ErrInvalidURL, raw)
		}
		sync := "FULL"
		for k, v := range u.Query() {
			switch {
			case k == "synchronous" && len(v) == 1 && (strings.EqualFold(v[0], "full") || strings.EqualFold(v[0], "normal")):
				sync = strings.ToUpper(v[0])
			case k == "synchronous":
				return nil, fmt.Errorf("%w: synchronous=%q: use full (the default) or normal", ledger.ErrInvalidURL, strings.Join(v, ","))
			default:
				return nil, fmt.Errorf("%w: unknown SQLite ledger URL parameter %q (known: synchronous)", ledger.ErrInvalidURL, k)
			}
		}
		return open(ctx, u.Path, opts, sync, sqlledger.LogLimits{})
	})
}

// migrations are the schema's (package sqlschema, shared with the SQLite
// drivers benchmark), then the intake log's table: Record batches go to the
// intake log, folded into cairn_ledger later; then the status index, the
// notes table, and the error class column with its index (an intake log
// written before it holds images without the column: it is folded and
// emptied first).
var migrations = append(slices.Clip(sqlschema.SQLiteMigrations), sqlledger.LogMigration, sqlschema.StatusIndex, sqlschema.MetaTable,
	sqlschema.LogFoldV1, `DELETE FROM cairn_intake_log`, sqlschema.ErrorClassColumn, sqlschema.ErrorClassIndex)

// errorClassAt is the schema version from which cairn_ledger has its error
// class column (sqlledger.Dialect.ErrorClassAt).
var errorClassAt = slices.Index(migrations, sqlschema.ErrorClassColumn) + 1

// jsonRows passes a batch as one JSON argument, read with json_each: one
// statement for a whole batch, prepared once (SQLite caps bound parameters).
func jsonRows(rows [][]any, types []string) (string, []any) {
	data, _ := json.Marshal(rows)
	return sqlschema.JSONEachFrom(len(types)), []any{string(data)}
}

// busy tells SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended
// codes: another process held the database past busy_timeout (30 s). sqlledger
// runs the transaction again until the caller's ctx ends.
func busy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == 5 || se.Code()&0xff == 6)
}

// classifier says what to do about a database that cannot grow: SQLITE_FULL
// (13: the disk or file system holding path is full, or a quota is used
// up). Not retried: freeing space is the operator's to do.
func classifier(path string) func(error) error {
	return func(err error) error {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == 13 {
			return fmt.Errorf("the disk holding %s is full: free space and retry: %w", filepath.Dir(path), err)
		}
		return err
	}
}

// Open opens (creating if needed) the ledger file at path. With
// Options.MustExist it creates nothing: a missing file (or one without the
// ledger's tables) is ledger.ErrNoLedger, and the file is opened read-write
// without SQLite's create flag.
func Open(ctx context.Context, path string, opts *ledger.Options) (*ledger.Ledger, error) {
	b, err := open(ctx, path, opts, "FULL", sqlledger.LogLimits{})
	if err != nil {
		return nil, err
	}
	return ledger.New(b), nil
}

// open opens the ledger at path with synchronous set to sync: FULL (a commit
// that returned is on disk) or NORMAL (WAL mode: no fsync per commit; a power
// loss or OS crash may lose the last commits, a crash of the process does
// not). NORMAL is for ledgers whose loss does not matter, such as cairn
// demo's temporary one (URL parameter synchronous=normal).
func open(ctx context.Context, path string, opts *ledger.Options, sync string, limits sqlledger.LogLimits) (*sqlledger.Backend, error) {
	// WAL mode is a property of the file, set when it is created: a file that
	// must exist is not converted (an empty one would be written to).
	mode, journal := "", "&_pragma=journal_mode(WAL)"
	if opts != nil && opts.MustExist {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s", ledger.ErrNoLedger, path)
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("ledger: %s is not a SQLite file (%s)", path, fi.Mode().Type())
		}
		mode, journal = "&mode=rw", ""
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("ledger: creating %s: %w", filepath.Dir(path), err)
	}
	// wal_autocheckpoint and journal_size_limit bound the disk the WAL takes.
	// Checkpointing at SQLite's default (1,000 pages) copied the WAL into the
	// file after almost every commit when batches wrote their rows directly;
	// at 4,096 pages (16 MiB) a checkpoint still writes each page once for
	// many commits (batches go to the intake log, one row each). The WAL
	// file is cut back to 16 MiB after each checkpoint, instead of keeping
	// the largest size it ever reached: it holds at most 16 MiB plus a
	// transaction (a fold of the intake log) at any time, so space freed on
	// a full disk is not eaten again by the WAL (at 16,384 pages and no
	// limit it grew to 64 MiB and stayed there).
	// cache_size and mmap_size bound the memory the file takes: pages read
	// go through the mapping (the first 256 MiB of the file: the kernel's
	// page cache, shared and reclaimable), and pages written or beyond the
	// mapping through SQLite's page cache, 16 MiB of pages. The driver's
	// allocator gives each 4 KiB page (plus SQLite's header) an 8 KiB slot,
	// so the cache takes up to twice its size in RSS: at 64 MiB, 2,000,000
	// records' serve held 165 MB anonymous memory, 63 MB at 16 MiB (cairn
	// bench rss), with no difference in cairn bench ledger's figures beyond
	// its noise (the mapping serves their reads).
	// A file: URI (SQLite applies mode=rw only so): '%', '?' and '#' in the
	// name are escaped, or the name would end there.
	esc := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	dsn := "file:" + esc + "?_txlock=immediate" + journal + "&_pragma=synchronous(" + sync + ")&_pragma=busy_timeout(30000)" +
		"&_pragma=cache_size(-16384)&_pragma=mmap_size(268435456)&_pragma=temp_store(memory)&_pragma=wal_autocheckpoint(4096)&_pragma=journal_size_limit(16777216)" + mode
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	// One connection: SQLite has one writer at a time anyway, and writers of
	// one process queueing on a Go mutex beat SQLite's busy handler, which
	// sleeps 1, 2, 5, 10… ms between tries. Other processes still wait on
	// busy_timeout.
	db.SetMaxOpenConns(1)
	l, err := sqlledger.New(ctx, db, sqlledger.Dialect{Name: "sqlite", Rebind: func(s string) string { return s },
		KeyIndexHint: "INDEXED BY cairn_ledger_key", Rows: jsonRows, Migrations: migrations, Transient: busy, IntakeLog: true, LogLimits: limits,
		Classify: classifier(path), ErrorClassAt: errorClassAt}, opts)
	if err != nil {
		db.Close()
		if errors.Is(err, ledger.ErrNoLedger) {
			return nil, fmt.Errorf("%w at %s: the file holds no ledger tables", ledger.ErrNoLedger, path)
		}
		if strings.Contains(err.Error(), "unable to open") || strings.Contains(err.Error(), "not a database") {
			return nil, fmt.Errorf("ledger: %s is not a usable SQLite file: %w", path, err)
		}
		return nil, err
	}
	return l, nil
}
