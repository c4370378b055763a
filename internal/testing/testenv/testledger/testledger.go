// Package testledger gives a test a ledger of its own: a SQLite ledger in the
// test's temporary directory, closed when the test ends. It is a package of
// its own, not part of testenv, so that the ledger packages' own tests can
// use testenv without an import cycle.
package testledger

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/sqlite" // sqlite:// URLs
)

// New opens a SQLite ledger in t.TempDir() with opts (nil: the defaults) and
// closes it when the test ends.
func New(t testing.TB, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(context.Background(), "sqlite://"+filepath.ToSlash(filepath.Join(t.TempDir(), "ledger.db")), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
