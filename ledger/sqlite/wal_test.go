package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// The WAL file stays small: it is checkpointed every 16 MiB and cut back to
// 16 MiB after a checkpoint, so it never holds much more than that plus one
// transaction (it used to grow to 64 MiB before its first checkpoint, and
// keep that size: space freed on a full disk was eaten again by the WAL).
func TestWALStaysSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	// A small intake log: batches are folded into the table often, so rows,
	// not just log entries, are written.
	b, err := sqlite.OpenBackendWithLogLimits(ctx, path, nil, sqlledger.LogLimits{Rows: 2000})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(b)
	defer l.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	const limit, transaction = 16 << 20, 24 << 20 // the WAL's bound, and room for one fold of 2,000 rows
	var most int64
	var sizes []int64
	for batch := range 40 { // ~64 MiB of WAL written at 16,384 pages and no limit
		evs := make([]event.Event, 1000)
		for i := range evs {
			evs[i] = event.Event{Bucket: "b", Key: fmt.Sprintf("%016x/%0150d", rnd.Uint64(), batch), Sequencer: "01", Kind: event.Created, Format: event.FormatS3}
		}
		if _, err := l.Record(ctx, "t", evs); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, fi.Size())
		sizes = append(sizes, fi.Size()>>20)
	}
	if most > limit+transaction {
		t.Fatalf("the WAL grew to %d MiB, want at most %d MiB (checkpoint at %d MiB, plus one transaction); its size after each batch (MiB): %v", most>>20, (limit+transaction)>>20, limit>>20, sizes)
	}
	t.Logf("the WAL's largest size: %.1f MiB", float64(most)/(1<<20))
}
