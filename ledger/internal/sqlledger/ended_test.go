package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
	_ "github.com/cairn-s3/cairn/ledger/sqlite" // sqlite:// URLs
)

// A call whose context ends mid-transaction gets an error that wraps the
// context's, even when the statement that failed (a real one, on the
// transaction database/sql rolled back) says only that it was rolled back
// ("sql: statement is closed" for a prepared statement, ErrTxDone for the
// rest). The stress test met the first in CI as "ledger (sqlite) record: sql:
// statement is closed".
func TestEndedContextInTheError(t *testing.T) {
	ctx := context.Background()
	lg, err := ledger.Open(ctx, "sqlite://"+filepath.ToSlash(filepath.Join(t.TempDir(), "ledger.db")), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	l := lg.Backend().(*sqlledger.Backend)
	// The failing statement: a prepared one, a plain one, or the COMMIT (fn
	// returns nil).
	for _, failing := range []string{"prepared", "plain", "commit"} {
		c, cancel := context.WithCancel(ctx)
		err := l.InTx(c, "record", func(tx *sql.Tx, _ time.Time) error {
			st, err := tx.PrepareContext(c, `SELECT 1`)
			if err != nil {
				return err
			}
			cancel()
			// database/sql rolls the transaction back from its own goroutine.
			for deadline := time.Now().Add(10 * time.Second); ; {
				if _, err := tx.ExecContext(ctx, `SELECT 1`); errors.Is(err, sql.ErrTxDone) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the transaction was not rolled back after its context ended")
				}
				time.Sleep(time.Millisecond)
			}
			switch failing {
			case "prepared":
				_, err = st.ExecContext(ctx)
			case "plain":
				_, err = tx.ExecContext(ctx, `SELECT 1`)
			default:
				return nil
			}
			return fmt.Errorf("ledger (sqlite) record: %w", err)
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want an error that wraps context.Canceled", failing, err)
		}
	}
	// An error of a live transaction is the call's own, context or not.
	own := errors.New("the call's own error")
	if err := l.InTx(ctx, "record", func(*sql.Tx, time.Time) error { return own }); err != own {
		t.Errorf("got %v, want the call's own error as it is", err)
	}
	// The ledger still works.
	if _, err := l.Claim(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
}
