package ledger_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/objledger"
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	_ "github.com/cairn-s3/cairn/objstore/fsstore" // file:// ledgers
)

// tree lists every path under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// openRecorded creates a ledger at url holding one record, and closes it.
func openRecorded(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "test", []event.Event{{Bucket: "b", Key: "k", Kind: event.Created, Sequencer: "01", ETag: "e"}}); err != nil {
		t.Fatal(err)
	}
}

// mustExistFinds opens url with MustExist and checks that it holds the record
// openRecorded wrote.
func mustExistFinds(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	l, err := ledger.Open(ctx, url, &ledger.Options{MustExist: true})
	if err != nil {
		t.Fatalf("MustExist on an existing ledger: %v", err)
	}
	defer l.Close()
	rs, err := l.Get(ctx, "b", "k")
	if err != nil || len(rs) != 1 {
		t.Fatalf("MustExist ledger: Get = %v, %v; want the record", rs, err)
	}
}

// With MustExist, a SQLite ledger that is not there is ErrNoLedger and
// nothing is created: no file, no directory, no WAL, not even a header in an
// empty file. (Open used to create ./cairn-data/ledger.db for `ledger ls`.)
func TestMustExistSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	for _, p := range []string{
		filepath.Join(dir, "ledger.db"),
		filepath.Join(dir, "no", "such", "dir", "ledger.db"),
		filepath.Join(dir, "empty.db"),
		"sqlite://" + filepath.Join(dir, "sub", "l.db"),
	} {
		l, err := ledger.Open(ctx, p, &ledger.Options{MustExist: true})
		if !errors.Is(err, ledger.ErrNoLedger) {
			if l != nil {
				l.Close()
			}
			t.Errorf("MustExist Open(%s): %v, want ErrNoLedger", p, err)
		}
	}
	if after := tree(t, dir); !slices.Equal(before, after) {
		t.Errorf("MustExist Open created files: before %q, after %q", before, after)
	}
	if fi, err := os.Stat(filepath.Join(dir, "empty.db")); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file was written to: %v, %v", fi, err)
	}
	p := filepath.Join(dir, "ledger.db")
	openRecorded(t, p)
	mustExistFinds(t, p)
}

// The object-store ledger: a missing directory is not created, a directory
// without the ledger's descriptor gets none.
func TestMustExistObjectStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	missing := "file://" + filepath.ToSlash(filepath.Join(dir, "no", "such"))
	if l, err := ledger.Open(ctx, missing, &ledger.Options{MustExist: true}); !errors.Is(err, ledger.ErrNoLedger) {
		if l != nil {
			l.Close()
		}
		t.Errorf("MustExist Open(%s): %v, want ErrNoLedger", missing, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MustExist Open(%s) created its directory: %v", missing, err)
	}
	url := "file://" + filepath.ToSlash(dir)
	if l, err := ledger.Open(ctx, url, &ledger.Options{MustExist: true}); !errors.Is(err, ledger.ErrNoLedger) {
		if l != nil {
			l.Close()
		}
		t.Errorf("MustExist Open(%s) of a store without a ledger: %v, want ErrNoLedger", url, err)
	}
	var descriptors []string
	for _, p := range tree(t, dir) {
		if filepath.Base(p) == "cairn-ledger.json" {
			descriptors = append(descriptors, p)
		}
	}
	if len(descriptors) > 0 {
		t.Errorf("MustExist Open wrote the ledger's descriptor: %q", descriptors)
	}
	openRecorded(t, url)
	mustExistFinds(t, url)
}

// PostgreSQL: a database without the ledger's tables is ErrNoLedger, and no
// table is created in it.
func TestMustExistPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.PostgresSchema(t, testenv.PGExec)
	if l, err := ledger.Open(ctx, url, &ledger.Options{MustExist: true}); !errors.Is(err, ledger.ErrNoLedger) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("MustExist Open of an empty schema: %v, want ErrNoLedger", err)
	}
	err := testenv.PGExec(ctx, url, `DO $$ BEGIN
  IF EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema()) THEN RAISE EXCEPTION 'tables were created'; END IF;
END $$`)
	if err != nil {
		t.Fatalf("MustExist Open of an empty schema: %v", err)
	}
	openRecorded(t, url)
	mustExistFinds(t, url)
}
