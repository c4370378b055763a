package dynamoledger_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
)

func TestMain(m *testing.M) {
	// The test server takes any credentials; the ledger's URL carries none,
	// so this process and its children read them from the environment.
	for _, kv := range testenv.DynamoDBEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	ledgertest.MaybeChild() // the child side of ledgertest's process cases
	testmain.Run(m)
}

// newTable returns the URL of a fresh ledger table on the test server.
func newTable(t testing.TB) string {
	t.Helper()
	ep := testenv.DynamoDB(t)
	return "dynamodb://" + testenv.UniqueName("cairn-ledger") + "?endpoint=" + ep + "&region=us-east-1&create_table=true"
}

// open opens url through hc (nil: the SDK's client).
func open(t testing.TB, url string, opts *ledger.Options, hc *http.Client) *ledger.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var l *ledger.Ledger
	var err error
	if hc != nil {
		l, err = dynamoledger.OpenWithClient(ctx, url, opts, hc)
	} else {
		l, err = dynamoledger.Open(ctx, url, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, ledgertest.Harness{
		New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
			url := newTable(t)
			return open(t, url, opts, nil), url
		},
		Env: testenv.DynamoDBEnv(),
	})
}

// TestOpen: a missing table is an error naming the table and the schema
// (ErrNoLedger for a command that must not make one), bad URLs say what is
// wrong, and create_table, retention (TTL where the endpoint has it;
// dynalite has not) and shards work through ledger.Open.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ep := testenv.DynamoDB(t)
	missing := "dynamodb://" + testenv.UniqueName("cairn-missing") + "?endpoint=" + ep + "&region=us-east-1"
	_, err := ledger.Open(ctx, missing, nil)
	if err == nil || !strings.Contains(err.Error(), "no such table") || !strings.Contains(err.Error(), "create_table=true") ||
		!strings.Contains(err.Error(), "PAY_PER_REQUEST") {
		t.Fatalf("missing table: %v, want an error naming the table and the schema", err)
	}
	if _, err := ledger.Open(ctx, missing+"&create_table=true", &ledger.Options{MustExist: true}); !errors.Is(err, ledger.ErrNoLedger) {
		t.Fatalf("missing table with MustExist: %v, want ErrNoLedger", err)
	}
	for _, bad := range []string{"dynamodb://x", "dynamodb://t@ble", "dynamodb://table/extra", "dynamodb://table?shards=0",
		"dynamodb://table?create_table=maybe", "dynamodb://table?retention=-1h", "dynamodb://table?retention=1m", "dynamodb://table?colour=blue"} {
		if _, err := ledger.Open(ctx, bad, nil); !errors.Is(err, ledger.ErrInvalidURL) {
			t.Errorf("%s: %v, want ErrInvalidURL", bad, err)
		}
	}
	url := newTable(t) + "&retention=720h&shards=3"
	l, err := ledger.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "s", []event.Event{{Bucket: "b", Key: "k", Sequencer: "01", Kind: event.Created}}); err != nil {
		t.Fatal(err)
	}
	// Another handle reads the shard count the ledger was made with.
	plain := strings.Replace(url, "&retention=720h&shards=3", "", 1)
	l2, err := ledger.Open(ctx, plain, &ledger.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	cs, err := l2.Claim(ctx, 5, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim through a second handle: %+v %v", cs, err)
	}
	// The handle opened without retention= keeps the ledger's: the processed
	// record expires (TTL) 720h after its last update.
	if exp, err := dynamoledger.ExpiresAt(ctx, l2, "b", "k"); err != nil || exp != 0 {
		t.Fatalf("expires_at of claimed work: %d, %v; want none", exp, err)
	}
	if err := l2.Complete(ctx, cs[0], ""); err != nil {
		t.Fatal(err)
	}
	r, err := l2.Get(ctx, "b", "k")
	if err != nil {
		t.Fatal(err)
	}
	if exp, err := dynamoledger.ExpiresAt(ctx, l2, "b", "k"); err != nil || exp != r[0].Updated.Add(720*time.Hour).Unix() {
		t.Fatalf("expires_at of processed work: %d, %v; want %d", exp, err, r[0].Updated.Add(720*time.Hour).Unix())
	}
	if _, err := ledger.Open(ctx, strings.Replace(url, "shards=3", "shards=4", 1), nil); err == nil || !strings.Contains(err.Error(), "3 shards") {
		t.Fatalf("a URL asking for other shards than the ledger has: %v", err)
	}
	// A table of the layout before the keys index is refused, naming the
	// schema to make.
	if err := dynamoledger.SetFormat(ctx, l2, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Open(ctx, plain, nil); err == nil || !strings.Contains(err.Error(), "format 1") || !strings.Contains(err.Error(), `"keys"`) {
		t.Fatalf("a ledger of format 1: %v, want an error naming the layout and the schema", err)
	}
}

// TestItemExtremes: a record with a 1,024-byte key, a MaxText cause and a
// MaxText result (the largest a record gets) is stored and read back
// byte-exact, far under DynamoDB's 400 KB item limit; so is a key of control
// characters and multi-byte characters.
func TestItemExtremes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	clk := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	l := open(t, newTable(t), &ledger.Options{EveryVersion: true, MaxAttempts: 2, Now: now}, nil)
	long := strings.Repeat("k", 1024)
	odd := "\x01\x1f\x7f ünï/\u00a0%2F+" + strings.Repeat("é", 490) // 1,024 bytes or so of UTF-8
	big := strings.Repeat("€", ledger.MaxText/3) + "x"              // exactly MaxText bytes
	for _, key := range []string{long, odd} {
		e := event.Event{Bucket: "b", Key: key, VersionID: strings.Repeat("v", 1024), Sequencer: "01", Kind: event.Created,
			ETag: strings.Repeat("e", 64), Name: "ObjectCreated:CompleteMultipartUpload"}
		if _, err := l.Record(ctx, "s", []event.Event{e}); err != nil {
			t.Fatalf("record %q: %v", key[:8], err)
		}
	}
	for range 2 {
		cs, err := l.Claim(ctx, 5, time.Minute)
		if err != nil || len(cs) != 2 {
			t.Fatalf("claims %d, %v", len(cs), err)
		}
		for _, c := range cs {
			if c.Attempts == 1 {
				err = l.Fail(ctx, c, big, true)
			} else {
				err = l.Complete(ctx, c, big)
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Attempts == 1 {
				if rs, err := l.Get(ctx, "b", c.Key); err != nil || rs[0].LastError != big || rs[0].Status != ledger.Failed {
					t.Fatalf("after a failure with a %d-byte cause: %v (cause intact: %v)", len(big), err, err == nil && rs[0].LastError == big)
				}
			}
		}
		mu.Lock()
		clk = clk.Add(time.Hour) // past the retry's backoff
		mu.Unlock()
	}
	for _, key := range []string{long, odd} {
		rs, err := l.Get(ctx, "b", key)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Key != key || rs[0].Result != big || rs[0].LastError != "" || rs[0].Status != ledger.Processed {
			t.Fatalf("record of a %d-byte key: status %s, key intact %v, result intact %v", len(key), rs[0].Status, rs[0].Key == key, rs[0].Result == big)
		}
	}
}

// A note written with an older time than the stored one (a request that
// landed late, its writer having given up on it; here a handle whose clock
// is behind) does not replace the newer note. Before, PutNote was an
// unconditional PutItem and the older value came back.
func TestOlderNoteDoesNotReplaceNewer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := newTable(t)
	now := open(t, url, nil, nil)
	behind := open(t, url, &ledger.Options{Now: func() time.Time { return time.Now().Add(-time.Minute) }}, nil)
	if err := now.PutNote(ctx, ledger.AuditNote, []byte(`"new"`)); err != nil {
		t.Fatal(err)
	}
	if err := behind.PutNote(ctx, ledger.AuditNote, []byte(`"old"`)); err != nil {
		t.Fatalf("a refused older note: %v, want no error (a newer note is there)", err)
	}
	if got, err := now.Note(ctx, ledger.AuditNote); err != nil || string(got) != `"new"` {
		t.Fatalf("note: %s %v, want \"new\"", got, err)
	}
}
