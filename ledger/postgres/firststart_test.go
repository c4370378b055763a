package postgres_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger/postgres"
)

// TestConcurrentFirstStart opens a fresh schema from several connection
// pools at once (what several cairn serve starting together do), many times:
// every open succeeds and the schema ends at the newest version. The schema
// table was once created before the advisory lock that serialises first
// starts, and two concurrent CREATE TABLE IF NOT EXISTS collide in
// PostgreSQL's catalog (duplicate key … "pg_type_typname_nsp_index").
func TestConcurrentFirstStart(t *testing.T) {
	t.Parallel()
	const trials, opens = 15, 6
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for trial := range trials {
		url := testenv.PostgresSchema(t, testenv.PGExec)
		start := make(chan struct{})
		errs := make([]error, opens)
		var wg sync.WaitGroup
		for i := range opens {
			wg.Go(func() {
				<-start
				l, err := postgres.Open(ctx, url, nil)
				if err == nil {
					err = l.Close()
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("trial %d: open %d of %d concurrent first opens: %v", trial, i+1, opens, err)
			}
		}
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		var rows, version int
		err = db.QueryRowContext(ctx, `SELECT count(*), max(version) FROM cairn_schema`).Scan(&rows, &version)
		db.Close()
		if err != nil || rows != 1 || version != postgres.SchemaVersion() {
			t.Fatalf("trial %d: cairn_schema has %d rows, version %d (%v); want 1 row at version %d", trial, rows, version, err, postgres.SchemaVersion())
		}
	}
}
