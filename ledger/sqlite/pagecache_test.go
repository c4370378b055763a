package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// SQLite's page cache on the ledger's connection stays within 16 MiB of
// pages when a statement writes every row of a bigger table. It was 64 MiB,
// which the driver's allocator makes about twice that in RSS (an 8 KiB slot
// a page): 120 MB of cairn serve's RSS once the ledger outgrew the mapping
// (2,000,000 records, cairn bench rss).
func TestPageCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	b, err := sqlite.OpenBackendWithLogLimits(ctx, path, nil, sqlledger.LogLimits{})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(b)
	defer l.Close()
	const n, batch = 60000, 5000
	for from := 0; from < n; from += batch {
		evs := make([]event.Event, batch)
		for i := range evs {
			evs[i] = event.Event{Bucket: "b", Key: fmt.Sprintf("photos/%08d.jpg", from+i), Sequencer: "01", ETag: fmt.Sprintf("%032x", from+i), Kind: event.Created, Name: "ObjectCreated:Put"}
		}
		if _, err := l.Record(ctx, "t", evs); err != nil {
			t.Fatal(err)
		}
	}
	// The intake log folded into the table (every call but Record and the
	// claims folds first).
	if _, err := l.Counts(ctx); err != nil {
		t.Fatal(err)
	}
	// Every row read for writing (a statement no ledger call makes: what
	// any of them could do is bounded the same way).
	if _, err := b.DB().ExecContext(ctx, `UPDATE cairn_ledger SET attempts = attempts + 1`); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	wal, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	used := cacheUsed(t, b.DB())
	t.Logf("page cache %d KiB after writing every row of a %d KiB file (WAL %d KiB)", used>>10, fi.Size()>>10, wal.Size()>>10)
	const limit = 24 << 20 // 16 MiB of pages and their headers, with room
	if used > limit {
		t.Fatalf("SQLite's page cache holds %d KiB, want at most %d KiB", used>>10, limit>>10)
	}
}
