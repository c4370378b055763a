package ledgertest

// Recording: decisions on every order of deliveries, the event a record hands
// back, Lookup, Get, List and Counts.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

func testBasics(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	test := event.Event{Bucket: "b", Kind: event.Test, Name: "TestEvent"}
	noop := event.Event{Bucket: "b", Key: "gone", Kind: event.Other, Name: "ObjectRemoved:NoOP", Sequencer: "01"}
	ds := must(l.Record(ctx, "webhook", []event.Event{ev("k", "0A"), ev("k", "0A"), ev("k", "09"), test, noop}))(t)
	want := []ledger.Outcome{ledger.Accepted, ledger.Duplicate, ledger.Stale, ledger.Ignored, ledger.Ignored}
	if got := outcomes(ds); !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if _, err := l.Get(ctx, "b", "gone"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an ignored event made a record: %v", err)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))(t)
	if len(cs) != 1 || cs[0].Key != "k" || cs[0].Seq != "0A" || cs[0].Token < 1 || cs[0].Attempts != 1 || cs[0].Source != "webhook" {
		t.Fatalf("claims %+v", cs)
	}
	if more := must(l.Claim(ctx, 10, time.Minute))(t); len(more) != 0 {
		t.Fatalf("a claimed key was handed out twice: %+v", more)
	}
	if err := l.Complete(ctx, cs[0], "ok"); err != nil {
		t.Fatal(err)
	}
	r := must(l.Get(ctx, "b", "k"))(t)[0]
	if r.Status != ledger.Processed || r.Seen != 3 || r.Stale != 1 || r.Result != "ok" || r.ETag != "etag-0A" {
		t.Fatalf("record %+v", r)
	}
	// A redelivery after processing is a duplicate and makes no work.
	if got := outcomes(must(l.Record(ctx, "webhook", []event.Event{ev("k", "0a")}))(t)); got[0] != ledger.Duplicate {
		t.Fatalf("redelivery (lower-case sequencer) after processing: %v", got)
	}
	if more := must(l.Claim(ctx, 10, time.Minute))(t); len(more) != 0 {
		t.Fatalf("a duplicate made work: %+v", more)
	}
	// Completing again by the same token is a retry: it succeeds and changes
	// nothing (see CompleteAgain).
	if err := l.Complete(ctx, cs[0], "again"); err != nil {
		t.Fatalf("completing twice: %v", err)
	}
	if r := must(l.Get(ctx, "b", "k"))(t)[0]; r.Result != "ok" {
		t.Fatalf("a second Complete by the same token changed the record: %+v", r)
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
		cs := must(l.Claim(ctx, 1000, time.Minute))(t)
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
		must(l.Record(ctx, "test", batch))(t)
		drain(t, ctx, l, log)
	}
	if len(log) != len(ps) {
		t.Fatalf("%d keys processed, want %d", len(log), len(ps))
	}
	checkLog(t, log, "3C")
	for i := range ps {
		r := must(l.Get(ctx, "b", fmt.Sprintf("perm/%04d", i)))(t)[0]
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
		held := must(l.Claim(ctx, 100000, time.Minute))(t)
		batch := make([]event.Event, len(ps))
		for i, p := range ps {
			batch[i] = ev(fmt.Sprintf("perm/%04d", i), p[step])
		}
		must(l.Record(ctx, "test", batch))(t)
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
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))(t)
	c := must(l.Claim(ctx, 1, time.Minute))(t)[0]
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))(t)); got[0] != ledger.Accepted {
		t.Fatalf("newer event while claimed: %v", got)
	}
	if more := must(l.Claim(ctx, 5, time.Minute))(t); len(more) != 0 {
		t.Fatalf("second claim on a key while one is active: %+v", more)
	}
	if err := l.Complete(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	r := must(l.Get(ctx, "b", "k"))(t)[0]
	if r.Status != ledger.Pending {
		t.Fatalf("after completing older work with newer accepted: %s, want pending", r.Status)
	}
	c2 := must(l.Claim(ctx, 5, time.Minute))(t)
	if len(c2) != 1 || c2[0].Seq != "02" || c2[0].Token <= c.Token {
		t.Fatalf("claim of the newer work: %+v", c2)
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
	must(l.Record(ctx, "s", []event.Event{a}))(t)
	cs := must(l.Claim(ctx, 10, time.Minute))(t)
	if len(cs) != 1 {
		t.Fatalf("claims %+v", cs)
	}
	check("Claim", cs[0].Event(), a)
	recs := must(l.Lookup(ctx, "b", []string{"a"}))(t)
	check("Lookup", recs["a"].Event(), a)

	// Pending work coalesced with a newer event: the claim is the newer one's.
	b1, b2 := full("b", "01", event.FormatS3), full("b", "02", event.FormatEventBridge)
	b2.Region, b2.Size = "", 7 // empty fields replace full ones too
	must(l.Record(ctx, "s", []event.Event{b1}))(t)
	must(l.Record(ctx, "s", []event.Event{b2}))(t)
	cs = must(l.Claim(ctx, 10, time.Minute))(t)
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
	must(l.Record(ctx, "s", []event.Event{ev("old", "01")}))(t) // pending, not from this batch
	held := must(l.Claim(ctx, 1, time.Minute))(t)[0]            // "old" is now claimed
	ds, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("a", "01"), ev("a", "01"), ev("b", "01"), ev("old", "02"), ev("c", "01")}, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(ds); !slices.Equal(got, []ledger.Outcome{ledger.Accepted, ledger.Duplicate, ledger.Accepted, ledger.Accepted, ledger.Accepted}) {
		t.Fatalf("decisions %v", got)
	}
	// Two claims of this batch's new work (all due at once: which two is the
	// backend's choice); never the row another holder has (old), never twice
	// one key.
	if len(cs) != 2 || cs[0].Key == cs[1].Key || cs[0].Token < 1 || cs[0].Attempts != 1 || cs[0].Status != ledger.Claimed {
		t.Fatalf("claims %+v", cs)
	}
	rest := must(l.Claim(ctx, 10, time.Minute))(t)
	if len(rest) != 1 || rest[0].Key == "old" || rest[0].Key == cs[0].Key || rest[0].Key == cs[1].Key {
		t.Fatalf("after RecordAndClaim claimed %s and %s, Claim got %+v, want the third", cs[0].Key, cs[1].Key, rest)
	}
	// The claims are real: complete one (and Claim's), let the other expire
	// and be taken over.
	for _, c := range []ledger.Claim{cs[0], rest[0]} {
		if err := l.Complete(ctx, c, "done"); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(11 * time.Second)
	again := must(l.Claim(ctx, 10, time.Minute))(t)
	if len(again) != 1 || again[0].Key != cs[1].Key || again[0].Token != cs[1].Token+1 {
		t.Fatalf("takeover of an expired RecordAndClaim claim of %s: %+v", cs[1].Key, again)
	}
	if err := l.Complete(ctx, cs[1], ""); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("superseded complete: %v", err)
	}
	// old's newer work waits for its holder.
	if err := l.Complete(ctx, held, ""); err != nil {
		t.Fatal(err)
	}
	if r := must(l.Get(ctx, "b", "old"))(t)[0]; r.Status != ledger.Pending || r.Seq != "02" {
		t.Fatalf("old after its holder completed: %+v", r)
	}
	// n = 0 claims nothing.
	if _, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("d", "01")}, 0, time.Minute); err != nil || len(cs) != 0 {
		t.Fatalf("n=0: %v %v", cs, err)
	}
}

// testRecordAndClaimOldestFirst: claiming while recording never jumps the
// queue: work that was due before the batch is claimed before the batch's
// own.
func testRecordAndClaimOldestFirst(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	// Enough old work that every shard of a sharded backend holds more of
	// it than the batch may claim there.
	var old []event.Event
	for i := range 64 {
		old = append(old, ev(fmt.Sprintf("old-%02d", i), "01"))
	}
	must(l.Record(ctx, "s", old))(t)
	clk.Add(time.Second)
	fresh := []event.Event{ev("new-a", "01"), ev("new-b", "01"), ev("new-c", "01"), ev("new-d", "01")}
	_, cs, err := l.RecordAndClaim(ctx, "s", fresh, 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatal("RecordAndClaim claimed nothing")
	}
	for _, c := range cs {
		if !strings.HasPrefix(c.Key, "old-") {
			t.Fatalf("RecordAndClaim claimed the new %s while older work waited: claims %v", c.Key, keysOf(cs))
		}
	}
	rest := must(l.Claim(ctx, 100, time.Minute))(t)
	if len(cs)+len(rest) != 68 {
		t.Fatalf("claimed %d while recording and %d after, want 68 in all", len(cs), len(rest))
	}
}

func keysOf(cs []ledger.Claim) []string {
	var ks []string
	for _, c := range cs {
		ks = append(ks, c.Key)
	}
	return ks
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
	must(l.Record(ctx, "s", evs))(t)
	got := must(l.Lookup(ctx, "b", append(keys, "never")))(t)
	if len(got) != len(evs) {
		t.Fatalf("Lookup found %d records, want %d", len(got), len(evs))
	}
	for _, e := range evs {
		if r, ok := got[e.Key]; !ok || r.Seq != e.Sequencer || r.ETag != e.ETag {
			t.Fatalf("Lookup[%q] = %+v, want sequencer %s", e.Key, r, e.Sequencer)
		}
	}
	if other := must(l.Lookup(ctx, "other-bucket", keys))(t); len(other) != 0 {
		t.Fatalf("Lookup crossed buckets: %d", len(other))
	}
}

func testEveryVersion(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, &ledger.Options{EveryVersion: true})
	if !l.EveryVersion() {
		t.Error("a ledger opened with Options.EveryVersion says it is not (Ledger.EveryVersion): give the backend a method EveryVersion() bool")
	}
	if latest, _ := h.New(t, nil); latest.EveryVersion() {
		t.Error("a ledger opened without Options.EveryVersion says it is (Ledger.EveryVersion)")
	}
	v := func(seq, ver string) event.Event { e := ev("k", seq); e.VersionID = ver; return e }
	// Delivered out of order; every version must run, oldest first, one at a time.
	must(l.Record(ctx, "s", []event.Event{v("03", "v3"), v("01", "v1"), v("02", "v2"), v("01", "v1")}))(t)
	var order []string
	for range 3 {
		cs := must(l.Claim(ctx, 10, time.Minute))(t)
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
	if rs := must(l.Get(ctx, "b", "k"))(t); len(rs) != 3 {
		t.Fatalf("%d records for 3 versions", len(rs))
	}
}

func testUnordered(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	must(l.Record(ctx, "s", []event.Event{ev("k", "05")}))(t)
	drain(t, ctx, l, map[string][]string{})
	audit := event.Event{Bucket: "b", Key: "k", Kind: event.Created, ETag: "etag-05", Format: event.FormatAudit}
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{audit}))(t)); got[0] != ledger.Duplicate {
		t.Fatalf("audit of an unchanged object: %v", got)
	}
	audit.ETag = "changed"
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{audit}))(t)); got[0] != ledger.Accepted {
		t.Fatalf("audit of a changed object: %v", got)
	}
	// A late real event older than the accepted one is still stale.
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("k", "04")}))(t)); got[0] != ledger.Stale {
		t.Fatalf("late older event after an audit resubmission: %v", got)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))(t)
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
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{late}))(t)); got[0] != ledger.Duplicate {
		t.Fatalf("the real event of a change an audit resubmitted: %v, want duplicate", got)
	}
	if r := must(l.Get(ctx, "b", "k"))(t)[0]; r.Seq != "06" || r.Status != ledger.Processed {
		t.Fatalf("after the late real event: %+v", r)
	}

	// An audit that saw an older state than an event already accepted (a write
	// landed between its LIST and its resubmission) is stale: newest wins.
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	newer := ev("race", "0A")
	newer.Time = t0.Add(20*time.Minute + 300*time.Millisecond)
	must(l.Record(ctx, "s", []event.Event{newer}))(t)
	seen := event.Event{Bucket: "b", Key: "race", Kind: event.Created, ETag: "older-state", Time: t0, Format: event.FormatAudit}
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{seen}))(t)); got[0] != ledger.Stale {
		t.Fatalf("audit of a state older than the accepted event: %v, want stale", got)
	}
	// One that saw a state newer than the accepted event (its event was lost)
	// is new work — even within the accepted event's second (listings have
	// whole seconds).
	seen.Time, seen.ETag = newer.Time.Truncate(time.Second), "newer-state"
	if got := outcomes(must(l.Record(ctx, "audit", []event.Event{seen}))(t)); got[0] == ledger.Stale || got[0] == ledger.Duplicate {
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
	must(l.Record(ctx, "s", evs))(t)
	var got []string
	f := ledger.Filter{Prefix: "dir/", Limit: 7}
	for {
		page := must(l.List(ctx, f))(t)
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
	counts := must(l.Counts(ctx))(t)
	if counts[ledger.Pending] != 26 {
		t.Fatalf("counts %v", counts)
	}
}

// oddKeys are keys S3 stores and event.Validate accepts that a backend could
// mangle: control characters (newline, tab, CR, ESC, DEL, C1), SQL LIKE and
// glob metacharacters, path-like keys, Unicode and the longest key.
var oddKeys = []string{"odd/new\nline", "odd/tab\tkey", "odd/cr\r\nlf", "odd/esc\x1b]0;t\a\x1b[2J", "odd/del\x7f", "odd/c1\u0085\u009b2J",
	"odd/\x01\x02\x1f", "odd/a\x01", "odd/a/b", "odd/100%_*?[x]", "odd/quote'\"\\", "../../etc/passwd", "a//b", "/lead", "odd/trail/", "odd/ünï 日本 🪨",
	"odd/" + strings.Repeat("\n", event.MaxKeyLen-4)}

// testOddKeys: every key event.Validate accepts is recorded, claimed, looked
// up, listed, filtered by prefix and replayed byte-exact.
func testOddKeys(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	var evs []event.Event
	for _, k := range oddKeys {
		e := ev(k, "01")
		if err := e.Validate(); err != nil {
			t.Fatalf("the suite's key %q is not a valid event key: %v", k, err)
		}
		evs = append(evs, e)
	}
	if ds := must(l.Record(ctx, "s", evs))(t); !slices.Equal(outcomes(ds), slices.Repeat([]ledger.Outcome{ledger.Accepted}, len(evs))) {
		t.Fatalf("decisions %v", outcomes(ds))
	}
	// The same keys again are duplicates: no backend folded two keys into one.
	if ds := must(l.Record(ctx, "s", evs))(t); !slices.Equal(outcomes(ds), slices.Repeat([]ledger.Outcome{ledger.Duplicate}, len(evs))) {
		t.Fatalf("decisions on redelivery %v", outcomes(ds))
	}
	recs := must(l.Lookup(ctx, "b", oddKeys))(t)
	for _, k := range oddKeys {
		if r, ok := recs[k]; !ok || r.Key != k || r.Event() != evs[slices.Index(oddKeys, k)] {
			t.Errorf("Lookup[%q] = %+v (found %v)", k, r.Event(), ok)
		}
		if rs := must(l.Get(ctx, "b", k))(t); len(rs) != 1 || rs[0].Key != k {
			t.Errorf("Get(%q) = %+v", k, rs)
		}
	}
	var listed []string
	for _, c := range must(l.List(ctx, ledger.Filter{Limit: 100}))(t) {
		listed = append(listed, c.Key)
	}
	want := slices.Sorted(slices.Values(oddKeys))
	if !slices.Equal(listed, want) {
		t.Errorf("List:\n got %q\nwant %q (byte order)", listed, want)
	}
	for prefix, want := range map[string][]string{"odd/a": {"odd/a\x01", "odd/a/b"}, "odd/\x01": {"odd/\x01\x02\x1f"}, "odd/100%_": {"odd/100%_*?[x]"},
		"odd/new\n": {"odd/new\nline"}, "odd/\n": {oddKeys[len(oddKeys)-1]}, "odd/%": nil, "odd/_": nil} {
		var got []string
		for _, c := range must(l.List(ctx, ledger.Filter{Prefix: prefix, Limit: 100}))(t) {
			got = append(got, c.Key)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List with prefix %q: %q, want %q", prefix, got, want)
		}
	}
	cs := must(l.Claim(ctx, 100, time.Minute))(t)
	if len(cs) != len(oddKeys) {
		t.Fatalf("claimed %d of %d keys", len(cs), len(oddKeys))
	}
	for _, c := range cs {
		i := slices.Index(oddKeys, c.Key)
		if i < 0 || c.Event() != evs[i] {
			t.Errorf("claim of %q carries %+v", c.Key, c.Event())
			continue
		}
		if err := l.Fail(ctx, c, "fails for "+c.Key, false); err != nil {
			t.Errorf("fail %q: %v", c.Key, err)
		}
	}
	for _, k := range []string{"odd/new\nline", "odd/100%_*?[x]", oddKeys[len(oddKeys)-1]} {
		if n := must(l.Replay(ctx, ledger.Selection{Bucket: "b", Key: k}))(t); n != 1 {
			t.Errorf("Replay of key %q replayed %d records, want 1", k, n)
		}
	}
	if n := must(l.Replay(ctx, ledger.Selection{Prefix: "odd/\x01"}))(t); n != 1 {
		t.Errorf("Replay of prefix %q replayed %d records, want 1", "odd/\x01", n)
	}
}
