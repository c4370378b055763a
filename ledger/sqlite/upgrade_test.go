package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/sqlschema"
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

// TestUpgradeToErrorClasses opens a ledger written before the error class
// column, with dead letters both in cairn_ledger and in an intake log not
// yet folded (images of the old shape: 31 values): the migration folds the
// log first and fills in every record's class, so grouping and selecting by
// class in SQL sees every dead letter.
func TestUpgradeToErrorClasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Index(migrations, sqlschema.LogFoldV1) // the schema version before the column
	old := func(key, status, lastError string, rev int) []any {
		return []any{"b", key, key, "", "e", 0, "put", "ObjectCreated:Put", 0, "01", "", status, 1, 1, 0, 0, 1, 2, 1, 0, lastError, "", "s", 1, 1, 0, "", "", "", "", rev}
	}
	images, _ := json.Marshal([][]any{old("y", "dead", `open "y": denied`, 1), old("z", "dead", "exit status 4", 2)})
	stmts := slices.Concat([]string{`CREATE TABLE cairn_schema (version INTEGER NOT NULL)`, `INSERT INTO cairn_schema VALUES (` + strconv.Itoa(before) + `)`}, migrations[:before])
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range [][]any{old("x", "dead", "exit status 3", 1), old("z", "pending", "", 1)} {
		if _, err := db.Exec(`INSERT INTO cairn_ledger (bucket, ident, key, version_id, etag, size, kind, name, event_time, seq, seq_sort, status, attempts, token,
lease_until, next_at, first_seen, updated, seen, stale, last_error, result, source, gen, run_gen, replays, format, region, request_id, host_id, rev)
VALUES (`+strings.TrimSuffix(strings.Repeat("?, ", len(r)), ", ")+`)`, r...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO cairn_intake_log (images) VALUES (?)`, string(images)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.GroupsErrorsInQuery() {
		t.Fatal("the SQLite ledger groups by error class in its query")
	}
	g, err := l.GroupErrors(ctx, ledger.Filter{Status: ledger.Dead}, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range g.Groups {
		var keys []string
		for _, k := range e.Examples {
			keys = append(keys, k.Key)
		}
		got = append(got, fmt.Sprintf("%s=%d%v", e.Class, e.Count, keys))
	}
	if fmt.Sprint(got) != `[exit status #=2[x z] open "…": denied=1[y]]` || g.Total != 3 {
		t.Fatalf("after the upgrade: %d dead letters, groups %v", g.Total, got)
	}
	cs, err := l.List(ctx, ledger.Filter{Status: ledger.Dead, ErrorClass: "exit status #"})
	if err != nil || len(cs) != 2 || cs[1].Key != "z" || cs[1].LastError != "exit status 4" {
		t.Fatalf("List by class after the upgrade: %+v, %v", cs, err)
	}
}

// TestUpgradedUnderARunningProcess: a newer cairn upgrades the schema while
// this one has the ledger open. This process must stop writing, not fold the
// intake log rows the newer one writes in its own column order (which stored
// a text in rev and made the keys unusable, found in review).
func TestUpgradedUnderARunningProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ev := func(key string) []event.Event {
		return []event.Event{{Bucket: "b", Key: key, Sequencer: "01", ETag: "e", Kind: event.Created, Name: "ObjectCreated:Put"}}
	}
	if _, err := l.Record(ctx, "t", ev("before")); err != nil {
		t.Fatal(err)
	}
	// The newer cairn: one more migration.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	logRows := func() (n int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM cairn_intake_log) + (SELECT count(*) FROM cairn_ledger)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rows := logRows()
	if _, err := db.ExecContext(ctx, `UPDATE cairn_schema SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	_, err = l.Record(ctx, "t", ev("after"))
	if err == nil || !strings.Contains(err.Error(), "upgraded") {
		t.Fatalf("Record after a newer cairn upgraded the ledger: %v, want a refusal naming the upgrade", err)
	}
	if got := logRows(); got != rows {
		t.Fatalf("the refused write changed the ledger's and the log's rows: %d, then %d", rows, got)
	}
}
