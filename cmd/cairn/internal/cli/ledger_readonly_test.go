package cli_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/width"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Commands that read a ledger (or change the records of one) never create
// one: run in a directory without ./cairn-data, `ledger ls` used to create
// ./cairn-data/ledger.db and print an empty table, and --ledger
// /no/such/dir/l.db created the directories. Through the real binary.
func TestReadOnlyLedgerCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := filepath.Join(dir, "bucket")
	s, err := objstore.Open(context.Background(), bucket, nil) // the store audit reads, made beforehand
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(context.Background(), "k", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := listTree(t, dir)
	const hint = "run cairn serve (or pass --ledger URL) first"
	deep := filepath.Join(dir, "no", "such", "dir", "l.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ledger", "ls"}, "no ledger at ./cairn-data/ledger.db: " + hint},
		{[]string{"ledger", "ls", "--json"}, "no ledger at ./cairn-data/ledger.db"},
		{[]string{"ledger", "show", "b/k"}, "no ledger at ./cairn-data/ledger.db: " + hint},
		{[]string{"ledger", "ls", "--ledger", deep}, "no ledger at " + deep + ": " + hint},
		{[]string{"ledger", "ls", "--ledger", "sqlite://" + deep}, "no ledger at sqlite://" + deep},
		{[]string{"ledger", "ls", "--ledger", "file://" + filepath.ToSlash(filepath.Join(dir, "objledger"))}, "no ledger at file://"},
		{[]string{"ledger", "purge"}, "no ledger at ./cairn-data/ledger.db"},
		{[]string{"replay", "--dry-run"}, "no ledger at ./cairn-data/ledger.db: " + hint},
		{[]string{"replay"}, "no ledger at ./cairn-data/ledger.db"},
		{[]string{"audit", "--store", bucket, "--bucket", "b", "--dry-run", "--grace", "0"}, "no ledger at ./cairn-data/ledger.db"},
	} {
		code, out, stderr := runBin(t, dir, nil, tc.args...)
		if code != cli.ExitRuntime || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("cairn %q: exit %d, stdout %q, stderr %q; want exit %d, no output, an error mentioning %q",
				tc.args, code, out, stderr, cli.ExitRuntime, tc.want)
		}
	}
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Errorf("commands that only read a ledger created files:\nbefore %q\nafter  %q", before, after)
	}
}

// ledger show: text shows the replay count (JSON always had it), and no
// "next attempt" for a record that has none scheduled (processed records
// showed the time their work finished as the next attempt).
func TestLedgerShowTextReplaysAndNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "webhook", []event.Event{
		{Bucket: "b", Key: "done", Kind: event.Created, Sequencer: "01", ETag: "e1"},
		{Bucket: "b", Key: "retry", Kind: event.Created, Sequencer: "02", ETag: "e2"},
	}); err != nil {
		t.Fatal(err)
	}
	// "done": processed, replayed, processed again.
	for i := range 2 {
		cs, err := l.Claim(ctx, 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Key == "done" {
				err = l.Complete(ctx, c, "ok")
			} else if i == 0 {
				err = l.Fail(ctx, c, "try later", true)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			if n, err := l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Processed}, Bucket: "b", Key: "done"}); err != nil || n != 1 {
				t.Fatalf("replay: %d, %v", n, err)
			}
		}
	}
	field := func(out, name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+(.*)$`).FindStringSubmatch(out)
		if m == nil {
			return "(absent)"
		}
		return strings.TrimSpace(m[1])
	}
	code, out, stderr := run(t, "ledger", "show", "b/done", "--ledger", path)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	if field(out, "status") != "processed" || field(out, "replays") != "1" || field(out, "next attempt") != "-" {
		t.Errorf("show of a processed, once replayed record: status %q, replays %q, next attempt %q; want processed, 1, -:\n%s",
			field(out, "status"), field(out, "replays"), field(out, "next attempt"), out)
	}
	code, out, stderr = run(t, "ledger", "show", "b/retry", "--ledger", path)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	if na := field(out, "next attempt"); field(out, "status") != "failed" || na == "-" || na == "(absent)" {
		t.Errorf("show of a failed record: status %q, next attempt %q; want failed with its retry time:\n%s", field(out, "status"), na, out)
	}
	if field(out, "replays") != "0" {
		t.Errorf("show of a never replayed record: replays %q, want 0", field(out, "replays"))
	}
}

// cellWidth is how many terminal cells s takes (wide CJK runes two,
// combining marks none).
func cellWidth(s string) int {
	n := 0
	for _, r := range s {
		switch k := width.LookupRune(r).Kind(); {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		case k == width.EastAsianWide || k == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}

// ledger ls aligns its columns by display width: keys with CJK characters
// (two cells each) or combining marks pushed their rows' later columns out
// of line.
func TestLedgerLsAlignsWideKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := ledger.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"ascii/plain.txt", "images/日本語のファイル.png", "ünï cøde/e\u0301.txt", "ｆｕｌｌ.txt"}
	var evs []event.Event
	for i, k := range keys {
		evs = append(evs, event.Event{Bucket: "b", Key: k, Kind: event.Created, Sequencer: "0" + string(rune('1'+i)), ETag: "e"})
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	code, out, stderr := run(t, "ledger", "ls", "--ledger", path)
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(keys)+1 {
		t.Fatalf("ls: %d lines, want %d:\n%s", len(lines), len(keys)+1, out)
	}
	col := func(line, word string) int {
		i := strings.Index(line, word)
		if i < 0 {
			return -1
		}
		return cellWidth(line[:i])
	}
	want := col(lines[0], "STATUS")
	for _, line := range lines[1:] {
		if got := col(line, "pending"); got != want {
			t.Errorf("ls: STATUS starts at cell %d of the header but %d in %q:\n%s", want, got, line, out)
		}
	}
}
