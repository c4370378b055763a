package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestConformance(t *testing.T) {
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		l, err := sqlite.Open(context.Background(), path, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, "sqlite://" + path
	}})
}
