package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

func TestSQLStatements(t *testing.T) {
	t.Parallel()
	if _, err := fence.SQLUpsert(fence.Postgres, "outputs; DROP TABLE x", "key", "fence_token"); err == nil {
		t.Fatal("an identifier with SQL in it was accepted")
	}
	got, _ := fence.SQLUpdate(fence.Postgres, "outputs", "key", "fence_token", "value", "note")
	want := "UPDATE outputs SET fence_token = $2, value = $3, note = $4 WHERE key = $1 AND fence_token <= $2"
	if got != want {
		t.Fatalf("SQLUpdate:\n%s\nwant\n%s", got, want)
	}
}

// Racing writers with tokens 1..N on PostgreSQL and SQLite: each succeeds or
// is refused as stale, the highest token always succeeds and the row ends
// with its write; a lower token is then refused by both the upsert and the
// update, and an equal one is accepted.
func TestSQLFencing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dialect fence.Dialect
		open    func(t *testing.T) *sql.DB
	}{
		{"postgres", fence.Postgres, func(t *testing.T) *sql.DB {
			url := testenv.PostgresSchema(t, testenv.PGExec)
			db, err := sql.Open("pgx", url)
			if err != nil {
				t.Fatal(err)
			}
			return db
		}},
		{"sqlite", fence.SQLite, func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/f.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
			if err != nil {
				t.Fatal(err)
			}
			return db
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := tc.open(t)
			defer db.Close()
			if _, err := db.ExecContext(ctx, `CREATE TABLE outputs (key TEXT PRIMARY KEY, fence_token BIGINT NOT NULL, value TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			upsert, _ := fence.SQLUpsert(tc.dialect, "outputs", "key", "fence_token", "value")
			update, _ := fence.SQLUpdate(tc.dialect, "outputs", "key", "fence_token", "value")
			const n = 24
			errs := make([]error, n+1)
			var wg sync.WaitGroup
			for tok := 1; tok <= n; tok++ {
				wg.Go(func() {
					errs[tok] = fence.SQLExec(ctx, db, upsert, "k", int64(tok), fmt.Sprint("by ", tok))
				})
			}
			wg.Wait()
			for tok, err := range errs[1:] {
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Fatalf("token %d: %v", tok+1, err)
				}
			}
			if errs[n] != nil {
				t.Fatalf("the highest token was refused: %v", errs[n])
			}
			var value string
			var tok int64
			q := "SELECT value, fence_token FROM outputs WHERE key = " + map[fence.Dialect]string{fence.Postgres: "$1", fence.SQLite: "?1"}[tc.dialect]
			if err := db.QueryRowContext(ctx, q, "k").Scan(&value, &tok); err != nil || tok != n || value != fmt.Sprint("by ", n) {
				t.Fatalf("row: %q %d %v, want the token-%d write", value, tok, err, n)
			}
			for _, stmt := range []string{upsert, update} {
				if err := fence.SQLExec(ctx, db, stmt, "k", n-1, "stale"); !errors.Is(err, fence.ErrStale) {
					t.Fatalf("a lower token: %v, want ErrStale", err)
				}
			}
			if err := fence.SQLExec(ctx, db, update, "k", n, "same holder"); err != nil {
				t.Fatalf("equal token update: %v", err)
			}
			if err := db.QueryRowContext(ctx, q, "k").Scan(&value, &tok); err != nil || value != "same holder" {
				t.Fatalf("row after equal-token update: %q %v", value, err)
			}
		})
	}
}
