package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// TestLedgerLsSaysWhenCutAndListsAll: ledger ls lists exactly --limit
// records and says on stderr when it left some out and how to see them;
// --limit 0 and --all list every record (--json as JSON lines, whole
// values); text columns are cut so one long key does not widen every row.
func TestLedgerLsSaysWhenCutAndListsAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := "long/" + strings.Repeat("x", 1019)
	evs := []event.Event{{Bucket: "b", Key: long, Kind: event.Created, Sequencer: "01"}}
	for i := range 2499 {
		evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k/%05d", i), Kind: event.Created, Sequencer: "01"})
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	const cut = "listed the first"
	for _, c := range []struct {
		args    []string
		rows    int
		cutNote bool
	}{
		{nil, 1000, true},
		{[]string{"--limit", "1500"}, 1500, true},
		{[]string{"--limit", "2500"}, 2500, false},
		{[]string{"--limit", "0"}, 2500, false},
		{[]string{"--all"}, 2500, false},
		{[]string{"--all", "--json"}, 2500, false},
		{[]string{"--limit", "7", "--json"}, 7, true},
	} {
		code, out, stderr := run(t, append([]string{"ledger", "ls", "--ledger", path}, c.args...)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		json := strings.Contains(strings.Join(c.args, " "), "--json")
		rows := len(lines)
		if !json {
			rows-- // the header
		}
		if code != 0 || rows != c.rows || strings.Contains(stderr, cut) != c.cutNote {
			t.Errorf("ls %q: exit %d, %d rows, want %d; stderr %q", c.args, code, rows, c.rows, stderr)
		}
		if c.cutNote && !strings.Contains(stderr, "--all (or --limit 0)") {
			t.Errorf("ls %q: stderr %q does not say how to see all", c.args, stderr)
		}
		for _, line := range lines {
			if !json && len(line) > 300 {
				t.Fatalf("ls %q: a line of %d bytes: %.100q…", c.args, len(line), line)
			}
		}
		if json && c.rows == 2500 && !strings.Contains(out, long) {
			t.Errorf("ls %q: the long key is not whole in JSON", c.args)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		hint string
	}{
		{[]string{"ledger", "ls", "--ledger", path, "--limit", "-1"}, cli.ExitUsage, "--all"},
		{[]string{"ledger", "show", "b/missing", "--ledger", path}, cli.ExitRuntime, "cairn ledger ls --bucket b"},
		{[]string{"ledger", "purge", "--ledger", path, "--older-than", "0s"}, cli.ExitUsage, "30d"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.hint) {
			t.Errorf("cairn %q: exit %d %q, want %d mentioning %q", tc.args, code, stderr, tc.code, tc.hint)
		}
	}
	if _, out, _ := run(t, "ledger", "purge", "--help"); strings.Contains(out, "720h") || !strings.Contains(out, "30d") {
		t.Errorf("purge --help speaks of 720h, or not of 30d:\n%s", out)
	}
}
