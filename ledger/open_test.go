package ledger_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/sqlite"
)

// Open refuses what is neither a URL of a known scheme nor a plausible file
// path, says why and what to write instead, shows no password, and creates
// nothing; plausible paths (spaces, '=' inside a name) still open.
func TestOpenRefusesImplausibleURLs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, hint string }{
		{"host=db.example user=cairn password=s3cr3t dbname=cairn", "use postgres://user:pass@host/db"},
		{"password='with s3cr3t spaces' host=h", "libpq keyword/value"},
		{"dbname=cairn", "libpq keyword/value"},
		{"host = h port = 5432", "libpq keyword/value"},
		{"postgres:u:s3cr3t@h/db", "postgres URL without its //"},
		{"postgresql:h/db?password=s3cr3t", "write postgres://…"},
		{"sqlite:ledger.db", "sqlite URL without its //"},
		{"ledger\x1b[2J.db", "control characters"},
		{"mysql://u:s3cr3t@h/db", "unknown scheme"},
		{"host=h password=s3cr3t x=y://z", "libpq keyword/value"},
	} {
		_, err := ledger.Open(ctx, tc.url, nil)
		if !errors.Is(err, ledger.ErrInvalidURL) {
			t.Errorf("Open(%q): %v, want ErrInvalidURL", tc.url, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.hint) || strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "\x1b") {
			t.Errorf("Open(%q): %q, want a message mentioning %q without the password or raw control characters", tc.url, msg, tc.hint)
		}
	}
	dir := t.TempDir()
	for _, name := range []string{"my ledger.db", "run=3/ledger.db", "data=1.db", "ünï.db", "what?.db", "a#b.db", "100%.db"} {
		l, err := ledger.Open(ctx, filepath.Join(dir, name), nil)
		if err != nil {
			t.Errorf("Open(%q): %v", name, err)
			continue
		}
		l.Close()
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Open(%q) made no file: %v", name, err)
		}
	}
}

// A SQLite ledger URL takes synchronous=normal (a throwaway ledger: no fsync
// per commit) or full, and no other parameter: an unknown one was ignored.
func TestOpenSQLiteParameters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, q := range []string{"synchronous=normal", "synchronous=FULL"} {
		l, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "l.db")+"?"+q, nil)
		if err != nil {
			t.Errorf("?%s: %v", q, err)
			continue
		}
		l.Close()
	}
	for _, q := range []string{"synchronous=off", "journal_mode=delete", "synchronous=normal&synchronous=full"} {
		l, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "m.db")+"?"+q, nil)
		if !errors.Is(err, ledger.ErrInvalidURL) {
			if l != nil {
				l.Close()
			}
			t.Errorf("?%s: %v, want ErrInvalidURL", q, err)
		}
	}
}
