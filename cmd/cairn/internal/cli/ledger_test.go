package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

func TestLedgerCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Record(ctx, "webhook", []event.Event{
		{Bucket: "b", Key: "dir/ünï code.txt", Kind: event.Created, Sequencer: "01", ETag: "e1"},
		{Bucket: "b", Key: "dir/ünï code.txt", Kind: event.Created, Sequencer: "01", ETag: "e1"},
		{Bucket: "b", Key: "other/x", Kind: event.Created, Sequencer: "05"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := l.Claim(ctx, 1, 60e9)
	_ = l.Fail(ctx, cs[0], "handler exploded", false)
	l.Close()

	code, out, stderr := run(t, "ledger", "ls", "--ledger", path, "--json")
	if code != 0 {
		t.Fatal(stderr)
	}
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 2 {
		t.Fatalf("ls --json: %d lines, want 2: %s", n, out)
	}
	code, out, _ = run(t, "ledger", "ls", "--ledger", "sqlite://"+path, "--status", "dead")
	if code != 0 || !strings.Contains(out, "handler exploded") || strings.Count(out, "\n") != 2 {
		t.Fatalf("ls --status dead: %d %q", code, out)
	}
	code, out, _ = run(t, "ledger", "show", "b/dir/ünï code.txt", "--ledger", path, "--json")
	var r ledger.Record
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Seen != 2 || r.Key != "dir/ünï code.txt" {
		t.Fatalf("show: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		hint string
	}{
		{[]string{"ledger", "ls", "--ledger", path, "--status", "bogus"}, cli.ExitUsage, "--status"},
		{[]string{"ledger", "ls", "--ledger", "ftp://x/y"}, cli.ExitUsage, "unknown scheme"},
		{[]string{"ledger", "show", "no-slash", "--ledger", path}, cli.ExitUsage, "BUCKET/KEY"},
		{[]string{"ledger", "show", "b/missing", "--ledger", path}, cli.ExitRuntime, "no such record"},
		{[]string{"ledger", "ls", "--ledger", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, cli.ExitRuntime, "unavailable"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.hint) {
			t.Errorf("cairn %q: exit %d %q, want %d mentioning %q", tc.args, code, stderr, tc.code, tc.hint)
		}
	}
}

// The ledger commands on an object-store ledger (the directory store).
func TestLedgerCommandsObjectStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "file://" + filepath.ToSlash(t.TempDir()) + "?shards=3"
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	for i := range 250 {
		evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k/%03d +%%", i), Kind: event.Created, Sequencer: "01", ETag: "e"})
	}
	if _, err := l.Record(ctx, "test", evs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	code, out, stderr := run(t, "ledger", "ls", "--ledger", url, "--json", "--limit", "1000")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n")+1 != 250 {
		t.Fatalf("ls: %d %s %s", code, stderr, out)
	}
	code, out, _ = run(t, "ledger", "show", "b/k/007 +%", "--ledger", url, "--json")
	var r ledger.Record
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Key != "k/007 +%" || r.Status != ledger.Pending {
		t.Fatalf("show: %d %q", code, out)
	}
}

func TestReplayAndPurgeCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(ctx, "webhook", []event.Event{{Bucket: "b", Key: "k", Kind: event.Created, Sequencer: "01", ETag: "e"}}); err != nil {
		t.Fatal(err)
	}
	cs, _ := l.Claim(ctx, 1, 60e9)
	_ = l.Fail(ctx, cs[0], "boom", false)
	l.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", "--dry-run", "--json"}, 0, `"replayed":1`},
		{[]string{"replay", "--status", "processed"}, cli.ExitUsage, "--force"},
		{[]string{"replay", "--status", "pending"}, cli.ExitUsage, "dead, failed or processed"},
		{[]string{"replay", "--key", "k"}, cli.ExitUsage, "--bucket"},
		{[]string{"replay", "--bucket", "b", "--key", "k"}, 0, "replayed 1 records"},
		{[]string{"replay"}, 0, "replayed 0 records"},
		{[]string{"ledger", "show", "b/k", "--json"}, 0, `"replays":1`},
		{[]string{"ledger", "purge", "--older-than", "59m", "--include-dead"}, cli.ExitUsage, "at least 1h"},
		{[]string{"ledger", "purge", "--older-than", "1h", "--include-dead"}, 0, "purged 0 records"}, // pending work is never purged
	} {
		code, out, stderr := run(t, append(tc.args, "--ledger", path)...)
		if code != tc.code || !strings.Contains(out+stderr, tc.want) {
			t.Errorf("cairn %q: exit %d %q %q, want %d mentioning %q", tc.args, code, out, stderr, tc.code, tc.want)
		}
	}
}
