package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// TestUpgradeFromSchema3 opens a ledger written by a cairn whose schema had
// three migrations (row locks and placeholder rows, before row revisions):
// its records keep their state and take new events; a placeholder row left
// behind is dropped.
func TestUpgradeFromSchema3(t *testing.T) {
	ctx := context.Background()
	exec := testenv.PGExec
	url := testenv.PostgresSchema(t, exec)
	for _, q := range slices.Concat([]string{`CREATE TABLE cairn_schema (version INTEGER NOT NULL)`, `INSERT INTO cairn_schema VALUES (3)`}, migrations[:3], []string{
		`INSERT INTO cairn_ledger (bucket, ident, key, seq, status, seen, gen, run_gen, token) VALUES ('b', 'k', 'k', '01', 'processed', 1, 1, 1, 1)`,
		`INSERT INTO cairn_ledger (bucket, ident, key, status) VALUES ('b', 'orphan', 'orphan', 'init')`}) {
		if err := exec(ctx, url, q); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ds, err := l.Record(ctx, "t", []event.Event{
		{Bucket: "b", Key: "k", Sequencer: "01", Kind: event.Created},
		{Bucket: "b", Key: "k", Sequencer: "02", Kind: event.Created},
		{Bucket: "b", Key: "orphan", Sequencer: "01", Kind: event.Created},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Outcome != ledger.Duplicate || ds[1].Outcome != ledger.Accepted || ds[2].Outcome != ledger.Accepted {
		t.Fatalf("decisions %v %v %v, want duplicate, new, new", ds[0].Outcome, ds[1].Outcome, ds[2].Outcome)
	}
	cs, err := l.Claim(ctx, 5, 60e9)
	if err != nil || len(cs) != 2 {
		t.Fatalf("claim after upgrade: %+v, %v", cs, err)
	}
	for _, c := range cs {
		if c.Key == "k" && (c.Seq != "02" || c.Token != 2 || c.Seen != 3) {
			t.Fatalf("claim of k after upgrade: %+v", c)
		}
	}
}
