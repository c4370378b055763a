package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/sqlite"
)

// bigErrors are the dead letters' errors of a large ledger, one per class
// with the details that differ from letter to letter (ids, numbers, quoted
// values), as handlers write them.
var bigErrors = []func(i int) string{
	func(i int) string { return fmt.Sprintf("handler: exit status %d", 1+i%3) },
	func(i int) string {
		return fmt.Sprintf("decode photos/%d.jpg: unsupported format %q at offset 0x%x", i, "webp-"+strconv.Itoa(i%7), i*31)
	},
	func(i int) string {
		return fmt.Sprintf("POST http://10.0.%d.%d:8080/v1/ingest: request id %08x-4b1c-9a2e-%012x: 503 Service Unavailable", i%250, i%200, i, i*7)
	},
	func(i int) string {
		return fmt.Sprintf("database: deadlock detected (txn %d) at 2026-11-27T14:%02d:%02dZ", i, i%60, i%60)
	},
}

// bigLedger is a SQLite ledger of total records of which dead are dead
// letters, made through the ledger's API: bucket "photos", keys
// k/0000000-… in order; the dead letters' errors cycle through bigErrors.
func bigLedger(tb testing.TB, total, dead int) *ledger.Ledger {
	tb.Helper()
	// synchronous=normal: a test's ledger need not survive a power cut, and
	// 50,000 Fails each wait for the disk otherwise.
	return bigLedgerAt(tb, "sqlite://"+filepath.ToSlash(filepath.Join(tb.TempDir(), "ledger.db"))+"?synchronous=normal", total, dead)
}

// bigLedgerAt is bigLedger at a ledger URL.
func bigLedgerAt(tb testing.TB, url string, total, dead int) *ledger.Ledger {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	l, err := ledger.Open(ctx, url, &ledger.Options{MaxAttempts: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	const batch = 5000
	for from := 0; from < total; from += batch {
		evs := make([]event.Event, 0, batch)
		for i := from; i < min(from+batch, total); i++ {
			k := fmt.Sprintf("k/%07d.jpg", i)
			evs = append(evs, event.Event{Bucket: "photos", Key: k, Sequencer: "0A", ETag: "e" + strconv.Itoa(i), Kind: event.Created, Name: "ObjectCreated:Put"})
		}
		if _, err := l.Record(ctx, "webhook", evs); err != nil {
			tb.Fatal(err)
		}
	}
	i := 0
	for i < dead {
		cs, err := l.Claim(ctx, min(batch, dead-i), time.Hour)
		if err != nil || len(cs) == 0 {
			tb.Fatalf("claimed %d: %v", len(cs), err)
		}
		for _, c := range cs {
			if err := l.Fail(ctx, c, bigErrors[i%len(bigErrors)](i), false); err != nil {
				tb.Fatal(err)
			}
			i++
		}
	}
	tb.Logf("a ledger of %d records, %d dead, made in %v", total, dead, time.Since(start).Round(time.Millisecond))
	return l
}

// listOnly is a ledger backend without ledger.ErrorGrouper: a ledger over
// it groups and selects dead letters by error class by reading every one
// through List, the status page's path before the SQL ledgers grouped in
// their own query (and still the object-store and DynamoDB ledgers' path).
type listOnly struct{ ledger.Backend }

// BenchmarkStatusAt200k: the page and the API over a ledger of 200,000
// records of which 50,000 are dead letters, as an operator uses them after a
// bad deploy: the first page, a group's dead letters, a later page, a key
// prefix, and the API; and the first page and the API while dead letters
// change (-changing: before each request, untimed, a dead letter is
// replayed, or a pending record dies, so the number of dead letters moves
// as it does while an operator works or the intake runs). Each view is
// asked of two handlers over the same
// SQLite file, one request each in turn: cairn's (the ledger groups and
// selects by error class in its own indexed queries, made afresh for every
// request) and the naive baseline, the List-based path (every dead letter
// read to group them, a grouping reused for up to 5 seconds while the
// number of dead letters stays the same, so -benchtime sets how often a
// fresh grouping shows in its p99). Each reports cairn's p50 and p99, the
// baseline's p99, and p99-x, the baseline's p99 over cairn's (how many
// times faster cairn's p99 is), and both maxima (the baseline's is a fresh
// grouping: in the views without changes it is at most one request in 5 s,
// under the p99 of a run of a few seconds).
func BenchmarkStatusAt200k(b *testing.B) {
	l := bigLedger(b, 200000, 50000)
	naive := ledger.New(listOnly{l.Backend()}) // not closed: l closes the backend
	if naive.GroupsErrorsInQuery() || !l.GroupsErrorsInQuery() {
		b.Fatal("the baseline must read through List, cairn's ledger group in its query")
	}
	handlers := []http.Handler{web.Handler(l, &web.Options{OperatorToken: "op"}), web.Handler(naive, &web.Options{OperatorToken: "op"})}
	cursor := ""
	for i, h := range handlers {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/status", nil))
		var st web.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.DeadNext == "" || len(st.DeadGroups) != len(bigErrors) || (i > 0 && st.DeadNext != cursor) {
			b.Fatalf("status %d: %v, %d groups, next %q", i, err, len(st.DeadGroups), st.DeadNext)
		}
		cursor = st.DeadNext
	}
	class := web.ErrorClass(bigErrors[2](7))
	ctx := context.Background()
	changes := 0
	// change replays a dead letter or lets a pending record die, in turn.
	change := func(b *testing.B) {
		b.StopTimer()
		defer b.StartTimer()
		changes++
		if changes%2 == 1 {
			if n, err := l.Replay(ctx, ledger.Selection{Bucket: "photos", Key: fmt.Sprintf("k/%07d.jpg", changes/2)}); err != nil || n != 1 {
				b.Fatalf("replayed %d: %v", n, err)
			}
			return
		}
		cs, err := l.Claim(ctx, 1, time.Hour)
		if err != nil || len(cs) != 1 {
			b.Fatalf("claimed %d: %v", len(cs), err)
		}
		if err := l.Fail(ctx, cs[0], bigErrors[changes%len(bigErrors)](changes), false); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range []struct {
		name, url string
		changing  bool
	}{
		{"page", "/", false},
		{"page-group", "/?error=" + url.QueryEscape(class), false},
		{"page-next", "/?after=" + cursor, false},
		{"page-prefix", "/?prefix=k/00499", false},
		{"api", "/api/v1/status", false},
		{"api-group", "/api/v1/status?error=" + url.QueryEscape(class), false},
		{"page-changing", "/", true},
		{"api-changing", "/api/v1/status", true},
	} {
		b.Run(v.name, func(b *testing.B) {
			var ds [2][]time.Duration // cairn's, the baseline's
			for b.Loop() {
				if v.changing {
					change(b) // both handlers see the same ledger
				}
				for i, h := range handlers {
					start := time.Now()
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", v.url, nil))
					ds[i] = append(ds[i], time.Since(start))
					if rec.Code != 200 {
						b.Fatalf("%s: %d %s", v.url, rec.Code, rec.Body)
					}
				}
			}
			q := func(ds []time.Duration, p float64) float64 {
				slices.Sort(ds)
				return float64(ds[int(p*float64(len(ds)-1))]) / 1e6
			}
			cairn, base := q(ds[0], 0.99), q(ds[1], 0.99)
			b.ReportMetric(q(ds[0], 0.50), "p50-ms")
			b.ReportMetric(cairn, "p99-ms")
			b.ReportMetric(base, "naive-p99-ms")
			b.ReportMetric(base/cairn, "p99-x")
			b.ReportMetric(q(ds[0], 1), "max-ms")
			b.ReportMetric(q(ds[1], 1), "naive-max-ms")
		})
	}
}
