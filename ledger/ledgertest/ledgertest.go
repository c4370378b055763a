// Package ledgertest is the conformance suite every intake ledger backend must
// pass: call Run from the backend's tests. Process tests re-execute the test
// binary; its TestMain must call MaybeChild first.
package ledgertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Harness makes fresh ledgers.
type Harness struct {
	// New returns an empty ledger with opts, and a URL other processes can open
	// it by ("" skips process tests). Register cleanup on t.
	New func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string)
	// Env is added to the environment of child processes (e.g. credentials).
	Env []string
	// Only, if set, runs just the cases of these names (e.g. "NoDeadlocks"
	// against a second server set up differently). Default: every case.
	Only []string
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Basics", testBasics},
		{"Permutations", testPermutations},
		{"PermutationsWhileClaimed", testPermutationsWhileClaimed},
		{"NewerWhileClaimed", testNewerWhileClaimed},
		{"LeaseExpiryAndFencing", testLease},
		{"RetryThenDead", testRetryDead},
		{"CompleteBatchAndRelease", testBatchRelease},
		{"RecordAndClaim", testRecordAndClaim},
		{"EventRoundTrip", testEventRoundTrip},
		{"Lookup", testLookup},
		{"ReplayAndPurge", testReplayPurge},
		{"EveryVersion", testEveryVersion},
		{"Unordered", testUnordered},
		{"ListAndCounts", testList},
		{"DuplicateStormGoroutines", testStorm},
		{"NoLostUpdates", testNoLostUpdates},
		{"NoDeadlocks", testNoDeadlocks},
		{"DuplicateStormProcesses", testStormProcesses},
		{"KilledWorker", testKilledWorker},
	}
	for _, tc := range tests {
		if len(h.Only) > 0 && !slices.Contains(h.Only, tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if r := recover(); r != nil {
					if f, ok := r.(failure); ok {
						t.Fatal(f.err)
					}
					panic(r)
				}
			}()
			tc.fn(t, h)
		})
	}
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ev(key, seq string) event.Event {
	return event.Event{Bucket: "b", Key: key, Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "etag-" + seq, Size: int64(len(seq)), Format: event.FormatS3}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// failure carries an error from must to the subtest's recover.
type failure struct{ err error }

// must returns v, or fails the running subtest (see Run) with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(failure{err})
	}
	return v
}

func outcomes(ds []ledger.Decision) []ledger.Outcome {
	var o []ledger.Outcome
	for _, d := range ds {
		o = append(o, d.Outcome)
	}
	return o
}

func testBasics(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	test := event.Event{Bucket: "b", Kind: event.Test, Name: "TestEvent"}
	noop := event.Event{Bucket: "b", Key: "gone", Kind: event.Other, Name: "ObjectRemoved:NoOP", Sequencer: "01"}
	ds := must(l.Record(ctx, "webhook", []event.Event{ev("k", "0A"), ev("k", "0A"), ev("k", "09"), test, noop}))
	want := []ledger.Outcome{ledger.New, ledger.Duplicate, ledger.Stale, ledger.Ignored, ledger.Ignored}
	if got := outcomes(ds); !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if _, err := l.Get(ctx, "b", "gone"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an ignored event made a record: %v", err)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))
	if len(cs) != 1 || cs[0].Key != "k" || cs[0].Seq != "0A" || cs[0].Token < 1 || cs[0].Attempts != 1 || cs[0].Source != "webhook" {
		t.Fatalf("claims %+v", cs)
	}
	if more := must(l.Claim(ctx, 10, time.Minute)); len(more) != 0 {
		t.Fatalf("a claimed key was handed out twice: %+v", more)
	}
	if err := l.Complete(ctx, cs[0], "ok"); err != nil {
		t.Fatal(err)
	}
	r := must(l.Get(ctx, "b", "k"))[0]
	if r.Status != ledger.Processed || r.Seen != 3 || r.Stale != 1 || r.Result != "ok" || r.ETag != "etag-0A" {
		t.Fatalf("record %+v", r)
	}
	// A redelivery after processing is a duplicate and makes no work.
	if got := outcomes(must(l.Record(ctx, "webhook", []event.Event{ev("k", "0a")}))); got[0] != ledger.Duplicate {
		t.Fatalf("redelivery (lower-case sequencer) after processing: %v", got)
	}
	if more := must(l.Claim(ctx, 10, time.Minute)); len(more) != 0 {
		t.Fatalf("a duplicate made work: %+v", more)
	}
	if err := l.Complete(ctx, cs[0], "again"); !errors.Is(err, ledger.ErrLeaseLost) && !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("completing twice: %v", err)
	}
}

// perms returns every distinct permutation of xs.
func perms(xs []string) [][]string {
	seen := map[string]bool{}
	var out [][]string
	for _, p := range allPerms(xs) {
		if k := strings.Join(p, ","); !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

func allPerms(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{slices.Clone(xs)}
	}
	var out [][]string
	for i := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, p := range allPerms(rest) {
			out = append(out, append([]string{xs[i]}, p...))
		}
	}
	return out
}

// worker drains claimable work, logging (key, seq) completions.
func drain(t *testing.T, ctx context.Context, l *ledger.Ledger, log map[string][]string) {
	t.Helper()
	for {
		cs := must(l.Claim(ctx, 1000, time.Minute))
		if len(cs) == 0 {
			return
		}
		for _, c := range cs {
			log[c.Key] = append(log[c.Key], c.Seq)
			if err := l.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkLog: per key, processed sequencers strictly increase, none twice, and
// the last is the newest.
func checkLog(t *testing.T, log map[string][]string, newest string) {
	t.Helper()
	for key, seqs := range log {
		for i := 1; i < len(seqs); i++ {
			if event.CompareSequencer(seqs[i-1], seqs[i]) >= 0 {
				t.Fatalf("key %s processed %v: an event processed after a newer (or equal) one", key, seqs)
			}
		}
		if len(seqs) == 0 || seqs[len(seqs)-1] != newest {
			t.Fatalf("key %s processed %v: the newest (%s) must be processed last", key, seqs, newest)
		}
	}
}

// Every permutation of three overwrites of a key, each delivered twice, ends
// with the newest processed exactly once and nothing older after it. One key
// per permutation, all in one ledger; a worker drains between deliveries.
func testPermutations(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	deliveries := []string{"1A", "1A", "2B", "2B", "3C", "3C"}
	ps := perms(deliveries)
	log := map[string][]string{}
	for step := range deliveries {
		batch := make([]event.Event, len(ps))
		for i, p := range ps {
			batch[i] = ev(fmt.Sprintf("perm/%04d", i), p[step])
		}
		must(l.Record(ctx, "test", batch))
		drain(t, ctx, l, log)
	}
	if len(log) != len(ps) {
		t.Fatalf("%d keys processed, want %d", len(log), len(ps))
	}
	checkLog(t, log, "3C")
	for i := range ps {
		r := must(l.Get(ctx, "b", fmt.Sprintf("perm/%04d", i)))[0]
		if r.Status != ledger.Processed || r.Seq != "3C" || r.Seen != 6 {
			t.Fatalf("perm %v: %+v", ps[i], r)
		}
	}
}

// The same, but each step's claims are taken BEFORE the delivery and completed
// after it, so newer events arrive while older work is in flight.
func testPermutationsWhileClaimed(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	deliveries := []string{"1A", "2B", "2B", "3C"}
	ps := perms(deliveries)
	log := map[string][]string{}
	for step := range deliveries {
		held := must(l.Claim(ctx, 100000, time.Minute))
		batch := make([]event.Event, len(ps))
		for i, p := range ps {
			batch[i] = ev(fmt.Sprintf("perm/%04d", i), p[step])
		}
		must(l.Record(ctx, "test", batch))
		for _, c := range held {
			log[c.Key] = append(log[c.Key], c.Seq)
			if err := l.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain(t, ctx, l, log)
	checkLog(t, log, "3C")
}

func testNewerWhileClaimed(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))
	c := must(l.Claim(ctx, 1, time.Minute))[0]
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))); got[0] != ledger.New {
		t.Fatalf("newer event while claimed: %v", got)
	}
	if more := must(l.Claim(ctx, 5, time.Minute)); len(more) != 0 {
		t.Fatalf("second claim on a key while one is active: %+v", more)
	}
	if err := l.Complete(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	r := must(l.Get(ctx, "b", "k"))[0]
	if r.Status != ledger.Pending {
		t.Fatalf("after completing older work with newer accepted: %s, want pending", r.Status)
	}
	c2 := must(l.Claim(ctx, 5, time.Minute))
	if len(c2) != 1 || c2[0].Seq != "02" || c2[0].Token <= c.Token {
		t.Fatalf("claim of the newer work: %+v", c2)
	}
}

func testLease(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))
	a := must(l.Claim(ctx, 1, 10*time.Second))[0]
	clk.Add(5 * time.Second)
	if _, err := l.Renew(ctx, a, 10*time.Second); err != nil {
		t.Fatalf("renew within the lease: %v", err)
	}
	clk.Add(11 * time.Second)
	if err := l.Complete(ctx, a, ""); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("complete after the lease expired: %v, want ErrLeaseLost", err)
	}
	b := must(l.Claim(ctx, 1, 10*time.Second))
	if len(b) != 1 || b[0].Token != a.Token+1 || b[0].Attempts != 2 {
		t.Fatalf("takeover after expiry: %+v (old token %d)", b, a.Token)
	}
	for name, f := range map[string]func() error{
		"complete": func() error { return l.Complete(ctx, a, "") },
		"fail":     func() error { return l.Fail(ctx, a, "x", true) },
		"renew":    func() error { _, err := l.Renew(ctx, a, time.Minute); return err },
	} {
		if err := f(); !errors.Is(err, ledger.ErrSuperseded) {
			t.Errorf("%s by the superseded holder: %v, want ErrSuperseded", name, err)
		}
	}
	if err := l.Complete(ctx, b[0], "done"); err != nil {
		t.Fatal(err)
	}
}

func testBatchRelease(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	must(l.Record(ctx, "s", []event.Event{ev("a", "01"), ev("b", "01"), ev("c", "01"), ev("d", "01")}))
	cs := must(l.Claim(ctx, 10, 10*time.Second))
	if len(cs) != 4 {
		t.Fatalf("claimed %d, want 4", len(cs))
	}
	byKey := map[string]ledger.Claim{}
	for _, c := range cs {
		byKey[c.Key] = c
	}
	// b gets newer work while claimed; c is released; d's lease expires and is
	// taken over, so its old claim is superseded in the batch.
	must(l.Record(ctx, "s", []event.Event{ev("b", "02")}))
	if err := l.Release(ctx, byKey["c"]); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, byKey["c"]); !errors.Is(err, ledger.ErrLeaseLost) && !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("second release: %v, want a refusal", err)
	}
	clk.Add(11 * time.Second)
	again := must(l.Claim(ctx, 10, 10*time.Second))
	keys := map[string]ledger.Claim{}
	for _, c := range again {
		keys[c.Key] = c
	}
	if c, ok := keys["c"]; !ok || c.Attempts != 1 {
		t.Fatalf("released work: claimable again with the attempt not counted; got %+v", again)
	}
	if _, ok := keys["d"]; !ok {
		t.Fatalf("expired claim of d not taken over: %+v", again)
	}
	// a and b expired too; complete a and b's fresh claims and d's stale one.
	batch := []ledger.Claim{keys["a"], keys["b"], byKey["d"]}
	errs, err := l.CompleteBatch(ctx, batch, []string{"ra", "rb", "rd"})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ledger.ErrSuperseded) {
		t.Fatalf("batch errors: %v, want nil, nil, ErrSuperseded", errs)
	}
	ra := must(l.Get(ctx, "b", "a"))[0]
	rb := must(l.Get(ctx, "b", "b"))[0]
	if ra.Status != ledger.Processed || ra.Result != "ra" {
		t.Fatalf("a after batch: %+v", ra)
	}
	if rb.Status != ledger.Processed || rb.Seq != "02" {
		t.Fatalf("b (its newer work was claimed after it arrived) after batch: %+v", rb)
	}
	if errs, err := l.CompleteBatch(ctx, nil, nil); err != nil || len(errs) != 0 {
		t.Fatalf("empty batch: %v %v", errs, err)
	}
}

// testEventRoundTrip: a claim hands the handler the event that was recorded,
// every field of it (issue 19: the format arrived empty, and so did the
// region and the request and host IDs), through Claim, RecordAndClaim and
// Lookup; a newer event accepted over pending work replaces them all.
func testEventRoundTrip(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	full := func(key, seq string, f event.Format) event.Event {
		return event.Event{Bucket: "b", Key: key, VersionID: "v-" + seq, ETag: "etag-" + seq, Size: 42, Sequencer: seq,
			Kind: event.Created, Name: "ObjectCreated:Put", Time: time.Date(2026, 2, 3, 4, 5, 6, 7_000_000, time.UTC),
			RequestID: "req-" + seq, HostID: "host-" + seq, Region: "eu-west-3", Format: f}
	}
	check := func(what string, got, want event.Event) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: the handler gets\n%+v\nfor the recorded\n%+v", what, got, want)
		}
	}
	a := full("a", "01", event.FormatMinIO)
	must(l.Record(ctx, "s", []event.Event{a}))
	cs := must(l.Claim(ctx, 10, time.Minute))
	if len(cs) != 1 {
		t.Fatalf("claims %+v", cs)
	}
	check("Claim", cs[0].Event(), a)
	recs := must(l.Lookup(ctx, "b", []string{"a"}))
	check("Lookup", recs["a"].Event(), a)

	// Pending work coalesced with a newer event: the claim is the newer one's.
	b1, b2 := full("b", "01", event.FormatS3), full("b", "02", event.FormatEventBridge)
	b2.Region, b2.Size = "", 7 // empty fields replace full ones too
	must(l.Record(ctx, "s", []event.Event{b1}))
	must(l.Record(ctx, "s", []event.Event{b2}))
	cs = must(l.Claim(ctx, 10, time.Minute))
	if len(cs) != 1 || cs[0].Key != "b" {
		t.Fatalf("claims %+v", cs)
	}
	check("Claim after a newer event", cs[0].Event(), b2)

	c := full("c", "01", event.FormatSNS)
	_, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{c}, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("RecordAndClaim claims %+v", cs)
	}
	check("RecordAndClaim", cs[0].Event(), c)
}

func testRecordAndClaim(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	must(l.Record(ctx, "s", []event.Event{ev("old", "01")})) // pending, not from this batch
	held := must(l.Claim(ctx, 1, time.Minute))[0]            // "old" is now claimed
	ds, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("a", "01"), ev("a", "01"), ev("b", "01"), ev("old", "02"), ev("c", "01")}, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(ds); !slices.Equal(got, []ledger.Outcome{ledger.New, ledger.Duplicate, ledger.New, ledger.New, ledger.New}) {
		t.Fatalf("decisions %v", got)
	}
	// Two claims, of this batch's new work, in delivery order; never the row
	// another holder has (old), never twice one key.
	if len(cs) != 2 || cs[0].Key != "a" || cs[1].Key != "b" || cs[0].Token != 1 || cs[0].Attempts != 1 || cs[0].Status != ledger.Claimed {
		t.Fatalf("claims %+v", cs)
	}
	rest := must(l.Claim(ctx, 10, time.Minute))
	if len(rest) != 1 || rest[0].Key != "c" {
		t.Fatalf("after RecordAndClaim, Claim got %+v, want only c", rest)
	}
	// The claims are real: complete one, let the other expire and be taken over.
	if err := l.Complete(ctx, cs[0], "done"); err != nil {
		t.Fatal(err)
	}
	clk.Add(11 * time.Second)
	again := must(l.Claim(ctx, 10, time.Minute))
	if len(again) != 1 || again[0].Key != "b" || again[0].Token != 2 {
		t.Fatalf("takeover of an expired RecordAndClaim claim: %+v", again)
	}
	if err := l.Complete(ctx, cs[1], ""); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("superseded complete: %v", err)
	}
	// old's newer work waits for its holder.
	if err := l.Complete(ctx, held, ""); err != nil {
		t.Fatal(err)
	}
	if r := must(l.Get(ctx, "b", "old"))[0]; r.Status != ledger.Pending || r.Seq != "02" {
		t.Fatalf("old after its holder completed: %+v", r)
	}
	// n = 0 claims nothing.
	if _, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("d", "01")}, 0, time.Minute); err != nil || len(cs) != 0 {
		t.Fatalf("n=0: %v %v", cs, err)
	}
}

func testLookup(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	var evs []event.Event
	var keys []string
	for i := range 1500 { // more than one internal chunk
		k := fmt.Sprintf("dir/ünï %04d+", i)
		keys = append(keys, k)
		if i%3 != 0 {
			evs = append(evs, ev(k, fmt.Sprintf("%02X", 1+i%7)))
		}
	}
	must(l.Record(ctx, "s", evs))
	got := must(l.Lookup(ctx, "b", append(keys, "never")))
	if len(got) != len(evs) {
		t.Fatalf("Lookup found %d records, want %d", len(got), len(evs))
	}
	for _, e := range evs {
		if r, ok := got[e.Key]; !ok || r.Seq != e.Sequencer || r.ETag != e.ETag {
			t.Fatalf("Lookup[%q] = %+v, want sequencer %s", e.Key, r, e.Sequencer)
		}
	}
	if other := must(l.Lookup(ctx, "other-bucket", keys)); len(other) != 0 {
		t.Fatalf("Lookup crossed buckets: %d", len(other))
	}
}

func testReplayPurge(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 1})
	must(l.Record(ctx, "s", []event.Event{ev("dead/a", "01"), ev("dead/b", "01"), ev("done/c", "01"), ev("wait/d", "01")}))
	for _, c := range must(l.Claim(ctx, 10, time.Minute)) {
		switch {
		case strings.HasPrefix(c.Key, "dead/"):
			if err := l.Fail(ctx, c, "boom", true); err != nil {
				t.Fatal(err)
			}
		case c.Key == "done/c":
			if err := l.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		default:
			if err := l.Release(ctx, c); err != nil { // stays pending
				t.Fatal(err)
			}
		}
	}
	if n := must(l.Replay(ctx, ledger.Selection{DryRun: true})); n != 2 {
		t.Fatalf("dry-run replay of dead letters: %d, want 2", n)
	}
	if n := must(l.Replay(ctx, ledger.Selection{Bucket: "b", Key: "dead/a"})); n != 1 {
		t.Fatalf("replay of one key: %d", n)
	}
	if _, err := l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Pending}}); err == nil {
		t.Fatal("replaying pending work must be refused")
	}
	r := must(l.Get(ctx, "b", "dead/a"))[0]
	if r.Status != ledger.Pending || r.Replays != 1 || r.Attempts != 0 || r.Seq != "01" || r.Seen != 1 {
		t.Fatalf("after replay: %+v (a replay is counted as such, not as a delivery)", r)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))
	if len(cs) != 2 { // dead/a replayed, wait/d pending
		t.Fatalf("claimable after replay: %+v", cs)
	}
	for _, c := range cs {
		if err := l.Complete(ctx, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := must(l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Processed}, Prefix: "done/"})); n != 1 {
		t.Fatalf("replay of processed work under a prefix: %d", n)
	}
	// Purge: only finished records older than the horizon; never pending work.
	clk.Add(48 * time.Hour)
	must(l.Record(ctx, "s", []event.Event{ev("fresh/e", "01")}))
	n := must(l.Purge(ctx, clk.Now().Add(-24*time.Hour), false))
	if n != 2 { // dead/a and wait/d (processed); done/c is pending again, dead/b dead
		t.Fatalf("purged %d, want 2", n)
	}
	if _, err := l.Get(ctx, "b", "dead/b"); err != nil {
		t.Fatalf("a dead letter was purged without being asked: %v", err)
	}
	if n := must(l.Purge(ctx, clk.Now().Add(-24*time.Hour), true)); n != 1 {
		t.Fatalf("purge with dead letters: %d, want 1", n)
	}
	c := must(l.Counts(ctx))
	if c[ledger.Pending] != 2 {
		t.Fatalf("pending work was purged: %v", c)
	}
	// done/c has waited since its replay, fresh/e since it arrived.
	if got := must(l.OldestPending(ctx)); !got.Equal(clk.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("OldestPending = %v, want %v", got, clk.Now().Add(-48*time.Hour))
	}
}

func testRetryDead(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute})
	must(l.Record(ctx, "s", []event.Event{ev("k", "01"), ev("perm", "01")}))
	for attempt := 1; attempt <= 3; attempt++ {
		cs := must(l.Claim(ctx, 10, time.Minute))
		var c *ledger.Claim
		for i := range cs {
			if cs[i].Key == "k" {
				c = &cs[i]
			} else if err := l.Fail(ctx, cs[i], "bad input", false); err != nil {
				t.Fatal(err)
			}
		}
		if c == nil || c.Attempts != attempt {
			t.Fatalf("attempt %d: claims %+v", attempt, cs)
		}
		if err := l.Fail(ctx, *c, fmt.Sprintf("boom %d", attempt), true); err != nil {
			t.Fatal(err)
		}
		if attempt < 3 {
			if cs := must(l.Claim(ctx, 10, time.Minute)); len(cs) != 0 {
				t.Fatalf("retried before its backoff: %+v", cs)
			}
			clk.Add(2 * time.Minute)
		}
	}
	r := must(l.Get(ctx, "b", "k"))[0]
	if r.Status != ledger.Dead || r.LastError != "boom 3" || r.Attempts != 3 {
		t.Fatalf("after max attempts: %+v", r)
	}
	if r := must(l.Get(ctx, "b", "perm"))[0]; r.Status != ledger.Dead {
		t.Fatalf("a non-retryable failure: %s, want dead", r.Status)
	}
	clk.Add(time.Hour)
	if cs := must(l.Claim(ctx, 10, time.Minute)); len(cs) != 0 {
		t.Fatalf("dead letters were claimed: %+v", cs)
	}
	// A newer event revives a dead key.
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))); got[0] != ledger.New {
		t.Fatalf("newer event for a dead key: %v", got)
	}
	if cs := must(l.Claim(ctx, 10, time.Minute)); len(cs) != 1 || cs[0].Attempts != 1 {
		t.Fatalf("claim after revival: %+v", cs)
	}
}

func testEveryVersion(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, &ledger.Options{EveryVersion: true})
	v := func(seq, ver string) event.Event { e := ev("k", seq); e.VersionID = ver; return e }
	// Delivered out of order; every version must run, oldest first, one at a time.
	must(l.Record(ctx, "s", []event.Event{v("03", "v3"), v("01", "v1"), v("02", "v2"), v("01", "v1")}))
	var order []string
	for range 3 {
		cs := must(l.Claim(ctx, 10, time.Minute))
		if len(cs) != 1 {
			t.Fatalf("every-version claims %+v: want exactly one version of the key at a time", cs)
		}
		order = append(order, cs[0].VersionID)
		if err := l.Complete(ctx, cs[0], ""); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(order, []string{"v1", "v2", "v3"}) {
		t.Fatalf("versions ran in order %v", order)
	}
	if rs := must(l.Get(ctx, "b", "k")); len(rs) != 3 {
		t.Fatalf("%d records for 3 versions", len(rs))
	}
}

func testUnordered(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	must(l.Record(ctx, "s", []event.Event{ev("k", "05")}))
	drain(t, ctx, l, map[string][]string{})
	audit := event.Event{Bucket: "b", Key: "k", Kind: event.Created, ETag: "etag-05", Format: event.FormatAudit}
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{audit}))); got[0] != ledger.Duplicate {
		t.Fatalf("audit of an unchanged object: %v", got)
	}
	audit.ETag = "changed"
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{audit}))); got[0] != ledger.New {
		t.Fatalf("audit of a changed object: %v", got)
	}
	// A late real event older than the accepted one is still stale.
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "04")}))); got[0] != ledger.Stale {
		t.Fatalf("late older event after an audit resubmission: %v", got)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))
	if len(cs) != 1 || cs[0].Seq != "05" || cs[0].ETag != "changed" {
		t.Fatalf("claim after audit: %+v", cs)
	}
	if err := l.Complete(ctx, cs[0], ""); err != nil {
		t.Fatal(err)
	}
	// The lost event of that change arrives late: the same state, so it is a
	// duplicate (processed once), and its sequencer is adopted.
	late := ev("k", "06")
	late.ETag = "changed"
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{late}))); got[0] != ledger.Duplicate {
		t.Fatalf("the real event of a change an audit resubmitted: %v, want duplicate", got)
	}
	if r := must(l.Get(ctx, "b", "k"))[0]; r.Seq != "06" || r.Status != ledger.Processed {
		t.Fatalf("after the late real event: %+v", r)
	}

	// An audit that saw an older state than an event already accepted (a write
	// landed between its LIST and its resubmission) is stale: newest wins.
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	newer := ev("race", "0A")
	newer.Time = t0.Add(20*time.Minute + 300*time.Millisecond)
	must(l.Record(ctx, "s", []event.Event{newer}))
	seen := event.Event{Bucket: "b", Key: "race", Kind: event.Created, ETag: "older-state", Time: t0, Format: event.FormatAudit}
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{seen}))); got[0] != ledger.Stale {
		t.Fatalf("audit of a state older than the accepted event: %v, want stale", got)
	}
	// One that saw a state newer than the accepted event (its event was lost)
	// is new work — even within the accepted event's second (listings have
	// whole seconds).
	seen.Time, seen.ETag = newer.Time.Truncate(time.Second), "newer-state"
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{seen}))); got[0] == ledger.Stale || got[0] == ledger.Duplicate {
		t.Fatalf("audit of a state newer than the accepted event: %v, want new work", got)
	}
}

func testList(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	var evs []event.Event
	for i := range 25 {
		evs = append(evs, ev(fmt.Sprintf("dir/%02d", i), "01"))
	}
	evs = append(evs, ev("other/x", "01"))
	must(l.Record(ctx, "s", evs))
	var got []string
	f := ledger.Filter{Prefix: "dir/", Limit: 7}
	for {
		page := must(l.List(ctx, f))
		for _, r := range page {
			got = append(got, r.Key)
		}
		if len(page) < f.Limit {
			break
		}
		f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
	}
	if len(got) != 25 || !slices.IsSorted(got) {
		t.Fatalf("paged list: %d keys %v", len(got), got)
	}
	counts := must(l.Counts(ctx))
	if counts[ledger.Pending] != 26 {
		t.Fatalf("counts %v", counts)
	}
}

// storm is the same duplicate storm each deliverer sends in its own order:
// keys × 3 overwrites × 3 copies.
func storm(keys int, seed uint64) []event.Event {
	var evs []event.Event
	for k := range keys {
		for _, seq := range []string{"01", "02", "03"} {
			for range 3 {
				evs = append(evs, ev(fmt.Sprintf("storm/%03d", k), seq))
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	return evs
}

// work delivers evs in batches while claiming and completing, logging what ran.
func work(ctx context.Context, l *ledger.Ledger, evs []event.Event, batch int, log func(key, seq string)) error {
	for start := 0; start < len(evs); start += batch {
		if _, err := l.Record(ctx, "storm", evs[start:min(start+batch, len(evs))]); err != nil {
			return err
		}
		cs, err := l.Claim(ctx, 8, time.Minute)
		if err != nil {
			return err
		}
		for _, c := range cs {
			log(c.Key, c.Seq)
			if err := l.Complete(ctx, c, ""); err != nil {
				return err
			}
		}
	}
	for {
		cs, err := l.Claim(ctx, 8, time.Minute)
		if err != nil || len(cs) == 0 {
			return err
		}
		for _, c := range cs {
			log(c.Key, c.Seq)
			if err := l.Complete(ctx, c, ""); err != nil {
				return err
			}
		}
	}
}

func checkStorm(t *testing.T, ctx context.Context, l *ledger.Ledger, keys int, log map[string][]string) {
	t.Helper()
	checkLog(t, log, "03")
	if len(log) != keys {
		t.Fatalf("%d keys processed, want %d", len(log), keys)
	}
	for k := range keys {
		r := must(l.Get(ctx, "b", fmt.Sprintf("storm/%03d", k)))[0]
		if r.Status != ledger.Processed || r.Seq != "03" {
			t.Fatalf("storm/%03d: %+v", k, r)
		}
	}
}

// testNoLostUpdates has goroutines record, claim and complete events of a
// few keys at once: every delivery must be counted on its key's record (a
// write decided on a stale read of the row would lose some), the stale ones
// too, and the newest sequencer must win.
func testNoLostUpdates(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	const keys, goroutines, rounds = 3, 8, 25
	var mu sync.Mutex
	seen, stale, newest := map[string]int{}, map[string]int{}, map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errs <- func() error {
				var prev event.Event
				for r := range rounds {
					e := ev(fmt.Sprintf("race/%d", (g+r)%keys), fmt.Sprintf("%04X%02X", r, g))
					evs := []event.Event{e}
					if r%5 == 4 {
						evs = append(evs, prev) // a duplicate delivery
					}
					prev = e
					var ds []ledger.Decision
					var cs []ledger.Claim
					var err error
					if r%2 == 1 {
						ds, cs, err = l.RecordAndClaim(ctx, "race", evs, 1, time.Minute)
					} else {
						ds, err = l.Record(ctx, "race", evs)
					}
					if err != nil {
						return err
					}
					if r%3 == 0 {
						more, err := l.Claim(ctx, 2, time.Minute)
						if err != nil {
							return err
						}
						cs = append(cs, more...)
					}
					for _, c := range cs {
						if err := l.Complete(ctx, c, ""); err != nil && !errors.Is(err, ledger.ErrSuperseded) && !errors.Is(err, ledger.ErrLeaseLost) {
							return err
						}
					}
					mu.Lock()
					for i, d := range ds {
						seen[evs[i].Key]++
						if d.Outcome == ledger.Stale {
							stale[evs[i].Key]++
						}
						if event.CompareSequencer(evs[i].Sequencer, newest[evs[i].Key]) > 0 {
							newest[evs[i].Key] = evs[i].Sequencer
						}
					}
					mu.Unlock()
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for k, n := range seen {
		r := must(l.Get(ctx, "b", k))[0]
		if r.Seen != n || r.Stale != stale[k] || r.Seq != newest[k] {
			t.Errorf("%s: seen %d, stale %d, sequencer %s; want %d, %d, %s (an update was lost)", k, r.Seen, r.Stale, r.Seq, n, stale[k], newest[k])
		}
	}
}

// testNoDeadlocks has 8 workers record batches (Record and RecordAndClaim),
// claim, and settle (CompleteBatch, Complete, Fail) over the same keys at once
// for a few seconds: the multi-row statements of one worker lock rows another
// is about to lock, so a backend that locks them in different orders deadlocks
// (PostgreSQL 40P01). No call may fail (a transient conflict is the backend's
// to retry), no settle may be refused (every claim holds a long lease), and
// at the end every key is processed at its newest sequencer.
func testNoDeadlocks(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, &ledger.Options{RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond, MaxAttempts: 1 << 20})
	const keys, workers, batch = 48, 8, 24
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	var mu sync.Mutex
	newest := map[string]string{}
	var calls, settled, failed int
	settle := func(rng *rand.Rand, cs []ledger.Claim) error {
		var batchCs []ledger.Claim
		for _, c := range cs {
			switch rng.IntN(8) {
			case 0:
				if err := l.Fail(ctx, c, "injected", true); err != nil {
					return fmt.Errorf("fail %s token %d: %w", c.Key, c.Token, err)
				}
				mu.Lock()
				failed++
				mu.Unlock()
			case 1:
				if err := l.Complete(ctx, c, "one"); err != nil {
					return fmt.Errorf("complete %s token %d: %w", c.Key, c.Token, err)
				}
			default:
				batchCs = append(batchCs, c)
			}
		}
		// Settle in an order of the worker's own, as a pipeline does.
		rng.Shuffle(len(batchCs), func(i, j int) { batchCs[i], batchCs[j] = batchCs[j], batchCs[i] })
		results := make([]string, len(batchCs))
		errs, err := l.CompleteBatch(ctx, batchCs, results)
		if err != nil {
			return fmt.Errorf("CompleteBatch of %d: %w", len(batchCs), err)
		}
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("CompleteBatch refused %s token %d: %w", batchCs[i].Key, batchCs[i].Token, err)
			}
		}
		mu.Lock()
		settled += len(cs)
		mu.Unlock()
		return nil
	}
	stop := time.Now().Add(duration)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			errs <- func() error {
				rng := rand.New(rand.NewPCG(uint64(g), 42))
				for r := 0; time.Now().Before(stop); r++ {
					evs := make([]event.Event, batch)
					for i := range evs {
						evs[i] = ev(fmt.Sprintf("dl/%02d", rng.IntN(keys)), fmt.Sprintf("%06X%02X%02X", r, g, i))
					}
					var cs []ledger.Claim
					var err error
					if r%2 == 0 {
						_, cs, err = l.RecordAndClaim(ctx, "deadlock", evs, batch/2, time.Hour)
					} else {
						_, err = l.Record(ctx, "deadlock", evs)
					}
					if err != nil {
						return fmt.Errorf("round %d: Record: %w", r, err)
					}
					mu.Lock()
					for _, e := range evs {
						if event.CompareSequencer(e.Sequencer, newest[e.Key]) > 0 {
							newest[e.Key] = e.Sequencer
						}
					}
					calls++
					mu.Unlock()
					more, err := l.Claim(ctx, batch, time.Hour)
					if err != nil {
						return fmt.Errorf("round %d: Claim: %w", r, err)
					}
					if err := settle(rng, append(cs, more...)); err != nil {
						return fmt.Errorf("round %d: %w", r, err)
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Drain what is left, then every key must be processed at its newest event.
	rng := rand.New(rand.NewPCG(99, 42))
	for deadline := time.Now().Add(time.Minute); ; {
		cs := must(l.Claim(ctx, 64, time.Hour))
		if len(cs) == 0 {
			c := must(l.Counts(ctx))
			if c[ledger.Pending]+c[ledger.Failed]+c[ledger.Claimed] == 0 {
				break
			}
		}
		if err := settle(rng, cs); err != nil {
			t.Fatalf("draining: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("work left after a minute of draining: %v", must(l.Counts(ctx)))
		}
		time.Sleep(2 * time.Millisecond)
	}
	c := must(l.Counts(ctx))
	if c[ledger.Processed] != len(newest) || c[ledger.Dead] != 0 {
		t.Fatalf("counts %v, want %d processed and nothing else", c, len(newest))
	}
	for k, seq := range newest {
		if r := must(l.Get(ctx, "b", k))[0]; r.Status != ledger.Processed || r.Seq != seq {
			t.Errorf("%s: %s at %s, want processed at %s", k, r.Status, r.Seq, seq)
		}
	}
	t.Logf("%d record calls, %d claims settled (%d failed on purpose) by %d workers in %v", calls, settled, failed, workers, duration)
}

func testStorm(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	const keys, goroutines = 24, 16
	var mu sync.Mutex
	log := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errs <- work(ctx, l, storm(keys, uint64(g+1)), 10, func(key, seq string) {
				mu.Lock()
				log[key] = append(log[key], seq)
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkStorm(t, ctx, l, keys, log)
}

const (
	envChild = "CAIRN_LEDGERTEST_CHILD"
	envURL   = "CAIRN_LEDGERTEST_URL"
	envSeed  = "CAIRN_LEDGERTEST_SEED"
)

// MaybeChild runs the child side of a process test and exits, if this process
// was started as one. Call it first in TestMain.
func MaybeChild() {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := ledger.Open(ctx, os.Getenv(envURL), nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	switch mode {
	case "storm":
		err = work(ctx, l, storm(30, seed), 10, func(key, seq string) { fmt.Println("ran", key, seq) })
	case "claim-and-hang":
		_, err = l.Record(ctx, "child", []event.Event{ev("durable", "01")})
		if err == nil {
			var cs []ledger.Claim
			cs, err = l.Claim(ctx, 1, 2*time.Second)
			if err == nil && len(cs) == 1 {
				fmt.Println("claimed", cs[0].Token)
				time.Sleep(time.Hour) // killed here
			}
		}
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l.Close()
	os.Exit(0)
}

func child(t *testing.T, h Harness, url, mode string, seed int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), h.Env...), envChild+"="+mode, envURL+"="+url, envSeed+"="+strconv.Itoa(seed))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

func testStormProcesses(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	const procs = 4
	type kid struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var kids []kid
	for p := range procs {
		cmd, out := child(t, h, url, "storm", p+1)
		kids = append(kids, kid{cmd, out})
	}
	log := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, k := range kids {
		wg.Go(func() {
			for k.out.Scan() {
				f := strings.Fields(k.out.Text())
				mu.Lock()
				if len(f) == 3 && f[0] == "ran" {
					log[f[1]] = append(log[f[1]], f[2])
				} else {
					t.Errorf("child: %s", k.out.Text())
				}
				mu.Unlock()
			}
			if err := k.cmd.Wait(); err != nil {
				t.Errorf("child: %v", err)
			}
		})
	}
	wg.Wait()
	checkStorm(t, ctx, l, 30, log)
}

// A worker killed with -9 between claim and complete: nothing recorded is lost,
// and once its lease expires the work is claimable again with a higher token.
func testKilledWorker(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	cmd, out := child(t, h, url, "claim-and-hang", 0)
	if !out.Scan() || !strings.HasPrefix(out.Text(), "claimed ") {
		t.Fatalf("child: %q", out.Text())
	}
	token, _ := strconv.ParseInt(strings.TrimPrefix(out.Text(), "claimed "), 10, 64)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if cs := must(l.Claim(ctx, 1, time.Minute)); len(cs) != 0 {
		t.Fatalf("claimed while the dead worker's lease is still running: %+v", cs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cs := must(l.Claim(ctx, 1, time.Minute))
		if len(cs) == 1 {
			if cs[0].Key != "durable" || cs[0].Token != token+1 {
				t.Fatalf("takeover claim %+v, want token %d", cs[0], token+1)
			}
			if err := l.Complete(ctx, cs[0], ""); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the killed worker's claim never became claimable again")
}
