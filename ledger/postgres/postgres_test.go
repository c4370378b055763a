package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
	"github.com/cairn-s3/cairn/ledger/postgres"
)

// TestMain runs the child side of ledgertest's process cases first (see
// ledgertest.MaybeChild), then the tests.
func TestMain(m *testing.M) {
	ledgertest.MaybeChild()
	testmain.Run(m)
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		url := testenv.PostgresSchema(t, testenv.PGExec)
		l, err := postgres.Open(context.Background(), url, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, url
	}})
}

// The shared test server runs with fsync off; slower, durable commits hold
// row locks longer, which is when concurrent batches are likeliest to deadlock.
// So the no-deadlock case also runs on a server of its own at the default
// fsync=on.
func TestNoDeadlocksDurable(t *testing.T) {
	t.Parallel()
	base := testenv.OwnDurablePostgres(t)
	ledgertest.Run(t, ledgertest.Harness{Only: []string{"NoDeadlocks"}, New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		l, err := postgres.Open(context.Background(), base, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, base
	}})
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := ledger.Open(ctx, "postgres://nobody@127.0.0.1:1/db?connect_timeout=2", nil)
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("unreachable database: %v, want ErrUnavailable", err)
	}
}
