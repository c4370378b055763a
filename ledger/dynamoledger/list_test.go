package dynamoledger_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// meter is an HTTP client that counts the DynamoDB requests sent through it
// by operation, and the items each Query and Scan read (ScannedCount) by
// index.
type meter struct {
	base    http.RoundTripper
	mu      sync.Mutex
	ops     map[string]int
	scanned map[string]int // index ("" the table): items read
}

func newMeter(t *testing.T) *meter {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &meter{base: tr, ops: map[string]int{}, scanned: map[string]int{}}
}

func (m *meter) client() *http.Client { return &http.Client{Transport: m} }

func (m *meter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.ops)
	clear(m.scanned)
}

func (m *meter) snapshot() (ops, scanned map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps(m.ops), maps(m.scanned)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (m *meter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	var in struct{ IndexName string }
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = json.Unmarshal(body, &in)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := m.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var out struct{ ScannedCount int }
	if op == "Query" || op == "Scan" {
		_ = json.Unmarshal(body, &out)
	}
	m.mu.Lock()
	m.ops[op]++
	m.scanned[in.IndexName] += out.ScannedCount
	m.mu.Unlock()
	return resp, nil
}

// TestListCountsReplayCost: List pages through a bucket off the keys index
// (reading about what each page returns, however far the cursor is), Counts
// reads the indexes, and Replay and Purge read only the partitions of the
// statuses they select; none scans the table. (They all scanned the table
// or the whole age index: List read every record for every page, so paging
// through N records read N²/limit.)
func TestListCountsReplayCost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := newMeter(t)
	clk := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var cmu sync.Mutex
	now := func() time.Time { cmu.Lock(); defer cmu.Unlock(); return clk }
	l := open(t, newTable(t)+"&shards=4", &ledger.Options{MaxAttempts: 1, Now: now}, m.client())
	const inB, inC, done, dead = 400, 200, 150, 5
	var evs []event.Event
	for i := range inB {
		evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k/%03d", i), Sequencer: "01", Kind: event.Created, ETag: "e"})
	}
	for i := range inC {
		evs = append(evs, event.Event{Bucket: "c", Key: fmt.Sprintf("k/%03d", i), Sequencer: "01", Kind: event.Created, ETag: "e"})
	}
	for i := 0; i < len(evs); i += 100 {
		if _, err := l.Record(ctx, "s", evs[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < done+dead; {
		cs, err := l.Claim(ctx, min(50, done+dead-n), time.Minute)
		if err != nil || len(cs) == 0 {
			t.Fatalf("claim: %d, %v", len(cs), err)
		}
		for _, c := range cs {
			if n < done {
				err = l.Complete(ctx, c, "")
			} else {
				err = l.Fail(ctx, c, "boom", false)
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
	}

	m.reset()
	var keys []string
	f := ledger.Filter{Bucket: "b", Prefix: "k/", Limit: 50}
	pages := 0
	for {
		page, err := l.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, c := range page {
			keys = append(keys, c.Key)
		}
		if len(page) < f.Limit {
			break
		}
		f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
	}
	ops, scanned := m.snapshot()
	if len(keys) != inB || !slices.IsSorted(keys) {
		t.Fatalf("listed %d keys of bucket b (sorted: %v), want %d", len(keys), slices.IsSorted(keys), inB)
	}
	if ops["Scan"] != 0 || scanned["keys"] > 3*inB+pages*4*10 {
		t.Errorf("listing %d records in %d pages: %d scans, %d items of the keys index read; want none, and about what was listed (ops %v, read %v)",
			inB, pages, ops["Scan"], scanned["keys"], ops, scanned)
	}

	m.reset()
	counts, err := l.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Counts{ledger.Pending: inB + inC - done - dead, ledger.Processed: done, ledger.Dead: dead}
	if !mapsEqual(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	if ops, _ := m.snapshot(); ops["Scan"] != 0 {
		t.Errorf("counts: %d scans, want none (%v)", ops["Scan"], ops)
	}

	for _, dry := range []bool{true, false} {
		m.reset()
		n, err := l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Dead}, DryRun: dry})
		if err != nil || n != dead {
			t.Fatalf("replay (dry run %v): %d, %v; want %d", dry, n, err, dead)
		}
		ops, scanned := m.snapshot()
		if ops["Scan"] != 0 || scanned["age"] > dead {
			t.Errorf("replay of %d dead records (dry run %v): %d scans, %d items of the age index read; want none and %d (ops %v)",
				dead, dry, ops["Scan"], scanned["age"], dead, ops)
		}
	}
	cmu.Lock()
	clk = clk.Add(48 * time.Hour)
	cmu.Unlock()
	m.reset()
	if n, err := l.Purge(ctx, now().Add(-time.Hour), false); err != nil || n != done {
		t.Fatalf("purge: %d, %v; want %d", n, err, done)
	}
	if ops, scanned := m.snapshot(); ops["Scan"] != 0 || scanned["age"] > done {
		t.Errorf("purge of %d processed records: %d scans, %d items of the age index read; want none and %d (ops %v)",
			done, ops["Scan"], scanned["age"], done, ops)
	}
}

func mapsEqual(a, b ledger.Counts) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestListOrder: List off the keys index returns exactly what the filter
// selects, in (bucket, ident) order, page after page, for keys that the
// index's 1,024-byte sort key cuts alike (ordered by their whole ident),
// control characters below the version separator \x1f (a key's versions
// sort after a longer key, so Through cannot end at the first key past it),
// several buckets, statuses, and pages of every size; on one shard (ties
// across pages) and on three.
func TestListOrder(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", event.MaxKeyLen-5)
	keys := []string{"a", "a\x01", "a\x01b", "a\x1f", "a\x1fz", "ab", "b", "b\x02c", "dir/1", "dir/2", "dir/10", "é", "日本"}
	for i := range 40 {
		keys = append(keys, long+fmt.Sprintf("%05d", i*7919%100000)) // 1,024 bytes: cut alike in the sort key
	}
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			l := open(t, newTable(t)+fmt.Sprintf("&shards=%d", shards), &ledger.Options{EveryVersion: true}, nil)
			type rec struct {
				bucket, key, ident string
				status             ledger.Status
			}
			var all []rec
			var evs []event.Event
			for bi, bucket := range []string{"b", "b-2", "c"} {
				for ki, k := range keys {
					if (bi+ki)%3 == 2 {
						continue
					}
					for v := range 1 + ki%2 {
						e := event.Event{Bucket: bucket, Key: k, Sequencer: fmt.Sprintf("%02X", v+1), Kind: event.Created, ETag: "e"}
						if ki%4 != 3 {
							e.VersionID = fmt.Sprint("v", v)
						}
						if err := e.Validate(); err != nil {
							t.Fatal(err)
						}
						evs = append(evs, e)
						ident := k
						if e.VersionID != "" {
							ident = k + "\x1f" + e.VersionID
						} else if v > 0 {
							continue // the same record again
						}
						all = append(all, rec{bucket, k, ident, ledger.Pending})
					}
				}
			}
			if _, err := l.Record(ctx, "s", evs); err != nil {
				t.Fatal(err)
			}
			// Some processed: claim every version that is first of its key.
			cs, err := l.Claim(ctx, 1000, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs[:len(cs)/2] {
				if err := l.Complete(ctx, c, ""); err != nil {
					t.Fatal(err)
				}
				for i := range all {
					if all[i].bucket == c.Bucket && all[i].ident == c.Ident {
						all[i].status = ledger.Processed
					}
				}
			}
			for _, c := range cs[len(cs)/2:] {
				for i := range all {
					if all[i].bucket == c.Bucket && all[i].ident == c.Ident {
						all[i].status = ledger.Claimed
					}
				}
			}
			slices.SortFunc(all, func(x, y rec) int { return cmp.Or(cmp.Compare(x.bucket, y.bucket), cmp.Compare(x.ident, y.ident)) })
			rng := rand.New(rand.NewPCG(uint64(shards), 3))
			filters := []ledger.Filter{{}, {Bucket: "b"}, {Bucket: "b-2", Prefix: "a"}, {Bucket: "c", Prefix: "a\x01"},
				{Bucket: "b", Through: "a"}, {Bucket: "b", Through: "a\x01"}, {Bucket: "b", Prefix: "a", Through: "a\x1f"},
				{Bucket: "c", Through: "dir/10"}, {Bucket: "b", Prefix: long}, {Bucket: "b", Prefix: long + "4"},
				{Bucket: "b", Through: long + "50000"}, {Prefix: "dir/"}, {Status: ledger.Processed}, {Status: ledger.Pending, Bucket: "b"},
				{Status: ledger.Claimed, Prefix: long}, {Bucket: "nope"}}
			for _, f := range filters {
				var want []string
				for _, r := range all {
					if (f.Bucket == "" || r.bucket == f.Bucket) && strings.HasPrefix(r.key, f.Prefix) && (f.Through == "" || r.key <= f.Through) &&
						(f.Status == "" || r.status == f.Status) {
						want = append(want, r.bucket+"/"+r.ident)
					}
				}
				for _, limit := range []int{1, 2 + rng.IntN(6), 7 + rng.IntN(30), 1000} {
					f := f
					f.Limit = limit
					var got []string
					for range len(all) + 2 {
						page, err := l.List(ctx, f)
						if err != nil {
							t.Fatal(err)
						}
						for _, c := range page {
							got = append(got, c.Bucket+"/"+c.Ident)
							if f.Status != "" && c.Status != f.Status {
								t.Errorf("%#v: %s/%q has status %s", f, c.Bucket, c.Ident, c.Status)
							}
						}
						if len(page) < f.Limit {
							break
						}
						f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
					}
					if !slices.Equal(got, want) {
						t.Errorf("List %#v, limit %d, paged: %d records\n got %q\nwant %q", f, limit, len(got), short(got), short(want))
					}
				}
			}
		})
	}
}

// short shortens the long keys in ss for messages.
func short(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		if len(s) > 40 {
			s = s[:10] + "…" + s[len(s)-20:]
		}
		out[i] = s
	}
	return out
}
