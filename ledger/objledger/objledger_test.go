package objledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	_ "github.com/cairn-s3/cairn/objstore/fsstore" // file:// ledgers
	"github.com/cairn-s3/cairn/objstore/mem"
)

// TestMain runs the child side of ledgertest's process cases first (see
// ledgertest.MaybeChild), then the tests.
func TestMain(m *testing.M) {
	ledgertest.MaybeChild()
	testmain.Run(m)
}

func open(t *testing.T, url string, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := ledger.Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// The directory store, with few shards and a small compaction threshold so the
// suite runs across compactions and shared shards.
func TestConformanceDirectory(t *testing.T) {
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		url := "file://" + filepath.ToSlash(t.TempDir()) + "?shards=4&compact_at=16"
		return open(t, url, opts), url
	}})
}

func TestConformanceMinIO(t *testing.T) { conformanceS3(t, "minio") }

func TestConformanceVersityGW(t *testing.T) { conformanceS3(t, "versitygw") }

func TestConformanceGofakes3(t *testing.T) { conformanceS3(t, "gofakes3") }

func TestConformanceSeaweedFS(t *testing.T) { conformanceS3(t, "seaweedfs") }

func TestConformanceCeph(t *testing.T) { conformanceS3(t, "ceph") }

func conformanceS3(t *testing.T, server string) {
	ep := testenv.S3Server(t, server)
	var buckets sync.Map // ledger URL → its bucket's backend (the credentials are in ep, not in this process's environment)
	open := func(t *testing.T, b objstore.Backend, opts *ledger.Options) *ledger.Ledger {
		pb, err := objstore.Prefixed(b, "ledger/")
		if err != nil {
			t.Fatal(err)
		}
		l, err := objledger.Open(context.Background(), objstore.New(pb, nil), opts, &objledger.Options{Shards: 8, CompactAt: 64})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		b, url := testenv.NewBucket(t, ep)
		url = strings.Replace(url, "?", "/ledger?", 1) + "&shards=8&compact_at=64"
		buckets.Store(url, b)
		return open(t, b, opts), url
	}, Env: ep.Env(), Open: func(t *testing.T, url string) *ledger.Ledger {
		b, ok := buckets.Load(url)
		if !ok {
			t.Fatalf("no ledger at %s", url)
		}
		return open(t, b.(objstore.Backend), nil)
	}})
}

// In memory behind fault injection: one write in ten has its response lost
// after the store applied it (or is lost before), one request in twenty fails,
// and every call is slow. Decisions stay exact: lost responses are resolved by
// the documents' nonces, never applied twice.
func TestConformanceUnderFaults(t *testing.T) {
	var seed atomic.Uint64
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		b := faulty.New(mem.OpenBackend(""), &faulty.Options{Seed: seed.Add(1), LostResponseRate: 0.05, LostRequestRate: 0.05, FailRate: 0.05,
			Latency: 200 * time.Microsecond, Jitter: time.Millisecond})
		// Opening retries through the injected failures (one failed request
		// must not stop a daemon from starting): no retry loop here.
		l, err := objledger.Open(context.Background(), objstore.New(b, nil), opts, &objledger.Options{Shards: 4, CompactAt: 16,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, ""
	}})
}

func ev(key, seq string) event.Event {
	return event.Event{Bucket: "b", Key: key, Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e" + seq, Format: event.FormatS3}
}

// A store that accepts conditional headers and ignores them is refused, and
// the error names the probe checks that failed.
func TestRefusesStoreIgnoringConditions(t *testing.T) {
	t.Parallel()
	b := faulty.New(mem.OpenBackend(""), &faulty.Options{IgnoreConditions: true})
	_, err := objledger.Open(context.Background(), objstore.New(b, nil), nil, nil)
	if !errors.Is(err, objstore.ErrNotSupported) || !strings.Contains(err.Error(), "put-if-match") {
		t.Fatalf("ledger on a store ignoring conditions: %v; want ErrNotSupported naming the failed check", err)
	}
}

func TestBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"file:///tmp/x?shards=0", "file:///tmp/x?compact_at=abc", "s3://b/p?nonsense=1"} {
		if _, err := ledger.Open(context.Background(), u, nil); err == nil {
			t.Errorf("%s: opened", u)
		}
	}
}

// Compaction moves records into bases and keeps every record readable with
// the same content; replaced bases are deleted after the grace period.
func TestCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	clock, advance := testClock()
	l, err := objledger.Open(ctx, s, &ledger.Options{Now: clock}, &objledger.Options{Shards: 2, CompactAt: 10, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys = 200
	for round, seq := range []string{"01", "02", "03"} {
		var evs []event.Event
		for k := range keys {
			evs = append(evs, ev(fmt.Sprintf("k/%03d", k), seq))
		}
		if _, err := l.Record(ctx, "t", evs); err != nil {
			t.Fatal(err)
		}
		for sh := range backendOf(l).Shards() {
			if err := backendOf(l).Compact(ctx, sh); err != nil {
				t.Fatal(err)
			}
		}
		// Process half of the keys.
		cs, err := l.Claim(ctx, keys/2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != keys/2 {
			t.Fatalf("round %d: claimed %d, want %d", round, len(cs), keys/2)
		}
		if errs, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil || errors.Join(errs...) != nil {
			t.Fatal(err, errs)
		}
		advance(2 * time.Minute)
	}
	counts, err := l.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[ledger.Processed]+counts[ledger.Pending] != keys || counts[ledger.Pending] == 0 {
		t.Fatalf("counts %v", counts)
	}
	for k := range keys {
		rs, err := l.Get(ctx, "b", fmt.Sprintf("k/%03d", k))
		if err != nil || len(rs) != 1 || rs[0].Seq != "03" || rs[0].Seen != 3 || rs[0].ETag != "e03" {
			t.Fatalf("k/%03d: %+v %v", k, rs, err)
		}
	}
	// Replaced bases are deleted once past their grace: after one more round
	// later than the grace, only the bases live before it may remain (now in
	// the trash, within their grace).
	listBases := func() map[string]bool {
		infos, err := s.ListAll(ctx, "shards/", nil)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, i := range infos {
			if strings.Contains(i.Key, "/base-") {
				m[i.Key] = true
			}
		}
		return m
	}
	before := listBases()
	if len(before) <= backendOf(l).Shards() {
		t.Fatalf("%d bases for %d shards before the last round: the test needs replaced bases", len(before), backendOf(l).Shards())
	}
	advance(2 * time.Minute)
	var evs []event.Event
	for k := range keys {
		evs = append(evs, ev(fmt.Sprintf("k/%03d", k), "04"))
	}
	if _, err := l.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	for sh := range backendOf(l).Shards() {
		if err := backendOf(l).Compact(ctx, sh); err != nil {
			t.Fatal(err)
		}
	}
	// Purge everything processed: tombstones, then gone after compaction.
	if _, err := l.Purge(ctx, clock().Add(time.Hour), true); err != nil {
		t.Fatal(err)
	}
	rest, err := l.List(ctx, ledger.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rest {
		if r.Status != ledger.Pending {
			t.Fatalf("after purge: %+v", r)
		}
	}
	if err := l.Close(); err != nil { // waits for background compactions
		t.Fatal(err)
	}
	survivors := 0
	for k := range listBases() {
		if before[k] {
			survivors++
		}
	}
	if survivors > backendOf(l).Shards() {
		t.Fatalf("%d of %d older bases survive a compaction past their grace", survivors, len(before))
	}
}

// The work index: a claimer never misses work a concurrent writer added to a
// shard it was looking at (the mark protocol), checked by a fresh instance
// that does not sweep.
func TestWorkIndexNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Slow index writes widen the window in which a writer can land between a
	// claimer's read of a shard and its index write.
	s := objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut && key == "work.json" {
			return faulty.None, 5 * time.Millisecond
		}
		return faulty.None, time.Duration(rand.IntN(500)) * time.Microsecond
	}}), nil)
	cfg := &objledger.Options{Shards: 32, SweepEvery: time.Hour}
	writer, err := objledger.Open(ctx, s, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	claimer, err := objledger.Open(ctx, s, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer claimer.Close()
	if _, err := claimer.Claim(ctx, 1, time.Minute); err != nil { // its one sweep, on an empty ledger
		t.Fatal(err)
	}
	const writers, each = 4, 60
	const n = writers * each
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					// Pauses let the claimer empty the shard and raise its entry
					// while writes keep landing: the race the marks guard.
					time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
					if _, err := writer.Record(ctx, "w", []event.Event{ev(fmt.Sprintf("x/%d/%d", w, i), "01")}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		// A Record lowers its index entries after it returned: Close
		// waits for that, so the claimer's empty Claim below means done.
		_ = writer.Close()
		done <- <-errs
	}()
	got := map[string]bool{}
	writing := true
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		cs, err := claimer.Claim(ctx, 4, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			got[c.Key] = true
			if err := claimer.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		}
		if writing {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				writing = false
			default:
			}
		} else if len(cs) == 0 {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("claimed %d of %d records through the index: work was lost from it", len(got), n)
	}
}

// A Claim returns due work the index points at even when this process's
// cached heads say the shard is empty: here every shard's entry is low (a
// Complete never raises one), the claimer saw every shard empty, and another
// process recorded one event. The claim used to budget by the stale caches
// and return nothing (31 times in 32), leaving the record to a later poll.
func TestClaimFindsWorkItsCachesMissed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock, advance := testClock()
	s := objstore.New(mem.OpenBackend(""), nil)
	cfg := &objledger.Options{Shards: 32, SweepEvery: time.Hour}
	opts := &ledger.Options{Now: clock}
	record := func(keys ...string) {
		t.Helper()
		w, err := objledger.Open(ctx, s, opts, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var evs []event.Event
		for _, k := range keys {
			evs = append(evs, ev(k, "01"))
		}
		if _, err := w.Record(ctx, "w", evs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil { // its index entries are lowered by now
			t.Fatal(err)
		}
	}
	claimer, err := objledger.Open(ctx, s, opts, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer claimer.Close()
	var keys []string
	for i := range 400 { // every shard gets work (w.h.p. by far)
		keys = append(keys, fmt.Sprintf("k/%d", i))
	}
	record(keys...)
	for drained := 0; drained < len(keys); {
		cs, err := claimer.Claim(ctx, 100, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			t.Fatalf("drained %d of %d, then Claim found nothing", drained, len(keys))
		}
		for _, c := range cs {
			if err := claimer.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		}
		drained += len(cs)
	}
	// The entries point at the leases' ends, now past: every shard is a
	// candidate, and the claimer's heads show nothing due in any.
	advance(time.Minute)
	for i := range 20 {
		k := fmt.Sprintf("late/%d", i)
		record(k)
		cs, err := claimer.Claim(ctx, 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].Key != k {
			t.Fatalf("round %d: Claim(1) = %d claims, want %s, which is due", i, len(cs), k)
		}
		if err := claimer.Complete(ctx, cs[0], ""); err != nil {
			t.Fatal(err)
		}
	}
}

// Awkward keys round-trip exactly: Get finds each, List pages through all in
// byte order.
func TestOddKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := objledger.Open(ctx, mem.Open(), nil, &objledger.Options{Shards: 3, CompactAt: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keys := []string{"a b/c+d%2F.txt", "ünïcødé/日本語", "x/../y", "%", "+", strings.Repeat("long/", 200) + "end", "a/b", "a\x1fb", `quote"back\slash`}
	var evs []event.Event
	for _, k := range keys {
		evs = append(evs, ev(k, "01"))
	}
	if _, err := l.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		rs, err := l.Get(ctx, "b", k)
		if err != nil || len(rs) != 1 || rs[0].Key != k {
			t.Fatalf("%q: %+v %v", k, rs, err)
		}
	}
	var listed []string
	f := ledger.Filter{Limit: 2}
	for {
		page, err := l.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, c := range page {
			listed = append(listed, c.Key)
		}
		f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %q, want %q", listed, want)
	}
}

// A head overwritten by something else is reported as corrupt, naming it;
// nothing panics and the other shards keep working.
func TestCorruptHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	l, err := objledger.Open(ctx, s, nil, &objledger.Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := s.PutBytes(ctx, "shards/000/head.json", []byte(`{"cairn_doc":1,"rev":1,"nonce":"x","value":{"rows":{"b/k":null}}}`), nil); err != nil {
		t.Fatal(err)
	}
	var bad, good int
	for i := range 20 {
		_, err := l.Record(ctx, "t", []event.Event{ev(fmt.Sprintf("k%d", i), "01")})
		switch {
		case err == nil:
			good++
		case strings.Contains(err.Error(), "shards/000/head.json") && strings.Contains(err.Error(), "malformed"):
			bad++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if bad == 0 || good == 0 {
		t.Fatalf("%d refused, %d recorded: want both (one shard corrupt)", bad, good)
	}
}

// backendOf is the object-store backend under l, for its own methods.
func backendOf(l *ledger.Ledger) *objledger.Backend { return l.Backend().(*objledger.Backend) }

// Older ledgers are upgraded when opened, so that older cairn versions refuse
// them from then on: a format-1 cairn would drop the segments a head names
// when rewriting it, a format-2 one would see no work in heads that no longer
// store it. A format-2 head's stored work map is ignored: the work is what
// its rows say. A newer format is refused.
func TestFormatUpgrade(t *testing.T) {
	ctx := context.Background()
	const key = "cairn-ledger.json"
	for _, old := range []int{1, 2} {
		s := mem.Open()
		if _, err := s.PutBytes(ctx, key, fmt.Appendf(nil, `{"cairn_ledger":%d,"shards":1,"created":1}`, old), nil); err != nil {
			t.Fatal(err)
		}
		// A head as format 2 wrote it: its work map names a row that is
		// not there and misses the one pending row.
		r := `{"b":"b","i":"k","k":"k","e":"e","q":"01","kd":"created","n":"ObjectCreated:Put","st":"pending","nx":1,"f":1,"u":1,"sn":1,"g":1,"ch":1}`
		if _, err := s.PutBytes(ctx, "shards/000/head.json", []byte(`{"seq":1,"rows":{"b/k":`+r+`},"work":{"b/ghost":1}}`), nil); err != nil {
			t.Fatal(err)
		}
		l, err := objledger.Open(ctx, s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := l.Claim(ctx, 10, time.Minute)
		l.Close()
		if err != nil || len(cs) != 1 || cs[0].Key != "k" {
			t.Fatalf("format %d: claims %v, %v; want the pending row's", old, cs, err)
		}
		data, _, err := s.GetBytes(ctx, key)
		if err != nil || !strings.Contains(string(data), `"cairn_ledger":3`) || !strings.Contains(string(data), `"shards":1`) {
			t.Fatalf("descriptor after opening a format-%d ledger: %s %v", old, data, err)
		}
		if data, _, err = s.GetBytes(ctx, "shards/000/head.json"); err != nil || strings.Contains(string(data), `"work"`) {
			t.Fatalf("head after a claim: %s %v; want no stored work", data, err)
		}
	}
	s := mem.Open()
	if _, err := s.PutBytes(ctx, key, []byte(`{"cairn_ledger":4,"shards":4,"created":1}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := objledger.Open(ctx, s, nil, nil); err == nil || !strings.Contains(err.Error(), "upgrade cairn") {
		t.Fatalf("opening a format-4 ledger: %v", err)
	}
}

// A head write carries the rows changed since the shard's segments, not its
// backlog: with 5,000 records pending in one shard, a head stays within
// about CompactAt rows (format 2 stored a work entry per pending record in
// every head: 5,000 of them here).
func TestHeadDoesNotGrowWithBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	cfg := &objledger.Options{Shards: 1, CompactAt: 64}
	l, err := objledger.Open(ctx, s, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 50 {
		var evs []event.Event
		for i := range 100 {
			evs = append(evs, ev(fmt.Sprintf("backlog/%d/%d", b, i), "01"))
		}
		if _, err := l.Record(ctx, "t", evs); err != nil {
			t.Fatal(err)
		}
	}
	// Close waits for the background compactions; a fresh handle's Compact
	// then has none to defer to.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = objledger.Open(ctx, s, nil, cfg); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := backendOf(l).Compact(ctx, 0); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 10, time.Minute) // one more head write
	if err != nil || len(cs) != 10 {
		t.Fatalf("claims %d, %v", len(cs), err)
	}
	data, _, err := s.GetBytes(ctx, "shards/000/head.json")
	if err != nil {
		t.Fatal(err)
	}
	// The claimed rows and the segment keys; format 2 wrote 186 KB here.
	if len(data) > 64*400 {
		t.Fatalf("head of a shard with 4,990 pending records is %d bytes", len(data))
	}
	n, err := l.Counts(ctx)
	if err != nil || n[ledger.Pending] != 4990 || n[ledger.Claimed] != 10 {
		t.Fatalf("counts %v, %v", n, err)
	}
}

// testClock: see objledger.NewTestClock.
var testClock = objledger.NewTestClock
