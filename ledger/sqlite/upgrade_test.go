package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// TestUpgradeFromSchema3 opens a ledger written by a cairn whose schema had
// three migrations (before row revisions): its records keep their state and
// take new events.
func TestUpgradeFromSchema3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range slices.Concat([]string{`CREATE TABLE cairn_schema (version INTEGER NOT NULL)`, `INSERT INTO cairn_schema VALUES (3)`}, migrations[:3]) {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO cairn_ledger (bucket, ident, key, seq, status, seen, gen, run_gen, token) VALUES ('b', 'k', 'k', '01', 'processed', 1, 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ds, err := l.Record(ctx, "t", []event.Event{
		{Bucket: "b", Key: "k", Sequencer: "01", Kind: event.Created},
		{Bucket: "b", Key: "k", Sequencer: "02", Kind: event.Created},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Outcome != ledger.Duplicate || ds[1].Outcome != ledger.Accepted {
		t.Fatalf("decisions %v %v, want duplicate, new", ds[0].Outcome, ds[1].Outcome)
	}
	cs, err := l.Claim(ctx, 5, 60e9)
	if err != nil || len(cs) != 1 || cs[0].Seq != "02" || cs[0].Token != 2 || cs[0].Seen != 3 {
		t.Fatalf("claim after upgrade: %+v, %v", cs, err)
	}
}
