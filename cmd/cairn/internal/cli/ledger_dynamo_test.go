package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// The ledger commands on a DynamoDB ledger (dynalite): ls, show, replay and
// purge, and a table that does not exist is no ledger. Not parallel: the
// ledger URL carries no credentials, so they are set in the environment.
func TestLedgerCommandsDynamoDB(t *testing.T) {
	for _, kv := range testenv.DynamoDBEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := context.Background()
	base := "dynamodb://" + testenv.UniqueName("cairn-cli") + "?region=us-east-1&endpoint=" + testenv.DynamoDB(t)
	// Recorded two hours ago, as the ledger's clock tells, so that the
	// processed record is older than the shortest retention (1h).
	l, err := ledger.Open(ctx, base+"&create_table=true", &ledger.Options{Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	for i := range 30 {
		evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k/%02d ü+%%", i), Kind: event.Created, Sequencer: "01", ETag: "e"})
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 2, time.Minute)
	if err != nil || len(cs) != 2 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	if err := l.Fail(ctx, cs[0], "boom", false); err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, cs[1], "ok"); err != nil {
		t.Fatal(err)
	}
	l.Close()
	code, out, stderr := run(t, "ledger", "ls", "--ledger", base, "--json", "--limit", "1000")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n")+1 != 30 {
		t.Fatalf("ls: %d %s %s", code, stderr, out)
	}
	code, out, _ = run(t, "ledger", "show", "b/"+cs[0].Key, "--ledger", base, "--json")
	var r ledger.Record
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Status != ledger.Dead || r.LastError != "boom" {
		t.Fatalf("show: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ledger", "ls", "--status", "dead"}, 0, "boom"},
		{[]string{"replay", "--dry-run", "--json"}, 0, `"replayed":1`},
		{[]string{"replay", "--bucket", "b", "--key", cs[0].Key}, 0, "replayed 1 records"},
		{[]string{"ledger", "purge", "--older-than", "1h"}, 0, "purged 1 records"}, // the processed one; never pending work
	} {
		code, out, stderr := run(t, append(tc.args, "--ledger", base)...)
		if code != tc.code || !strings.Contains(out+stderr, tc.want) {
			t.Errorf("cairn %q: exit %d %q %q, want %d mentioning %q", tc.args, code, out, stderr, tc.code, tc.want)
		}
	}
	missing := "dynamodb://" + testenv.UniqueName("cairn-none") + "?region=us-east-1&endpoint=" + testenv.DynamoDB(t)
	if code, _, stderr := run(t, "ledger", "ls", "--ledger", missing); code == 0 || !strings.Contains(stderr, "no ledger at") {
		t.Errorf("ls of a table that does not exist: %d %q", code, stderr)
	}
}
