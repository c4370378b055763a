package ledgertest

// Removals of one version (event.Event.VersionOnly) in a versioned bucket:
// never "the key is gone" when work is kept per key; that version's removal
// when it is kept per version.

import (
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// versionEvent is an event of key k's version ver, at t0 plus seq minutes.
func versionEvent(name, seq, ver, etag string) event.Event {
	kind := event.Created
	if name != "ObjectCreated:Put" {
		kind = event.Removed
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var minutes int
	for _, c := range seq {
		minutes = minutes*16 + int(c-'0')
	}
	return event.Event{Bucket: "b", Key: "k", VersionID: ver, ETag: etag, Kind: kind, Name: name, Sequencer: seq, Format: event.FormatS3,
		Time: t0.Add(time.Duration(minutes) * time.Minute),
		// As event.Parse sets it: a DELETE naming a version, a lifecycle
		// rule's noncurrent expiry.
		VersionOnly: kind == event.Removed && name != "ObjectRemoved:DeleteMarkerCreated"}
}

// A lifecycle rule deleting noncurrent versions, a DELETE of one version by
// id (noncurrent, then current), and a DELETE of a delete marker: with work
// per key none of them is taken for the key's removal (the handler would
// delete the mirror of a live object); when one deleted the accepted
// version, an audit's resubmission of what the key holds now is accepted
// although that object is older than the accepted event.
func testVersionRemovals(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	put := func(seq, ver string) event.Event { return versionEvent("ObjectCreated:Put", seq, ver, "etag-"+ver) }
	must(l.Record(ctx, "s", []event.Event{put("01", "v1"), put("02", "v2")}))(t)
	drain(t, ctx, l, map[string][]string{})
	check := func(step string, wantOutcome ledger.Outcome, evs []event.Event, kind event.Kind, ver string) {
		t.Helper()
		ds := must(l.Record(ctx, "s", evs))(t)
		if got := ds[len(ds)-1].Outcome; got != wantOutcome {
			t.Fatalf("%s: %v, want %s", step, outcomes(ds), wantOutcome)
		}
		r := must(l.Get(ctx, "b", "k"))(t)
		if len(r) != 1 || r[0].Kind != kind || r[0].VersionID != ver {
			t.Fatalf("%s: records %+v, want one of kind %s for version %s", step, r, kind, ver)
		}
	}
	// Day 31: the lifecycle rule permanently deletes noncurrent v1.
	check("lifecycle expiry of noncurrent v1", ledger.Ignored,
		[]event.Event{versionEvent("LifecycleExpiration:Delete", "03", "v1", "")}, event.Created, "v2")
	if cs := must(l.Claim(ctx, 10, time.Minute))(t); len(cs) != 0 {
		t.Fatalf("a noncurrent version's expiry made work: %+v", cs)
	}
	// A user deletes current v2 by id (v1 is gone too, say an older v0 is
	// current now): the event does not say what the key holds.
	check("DELETE ?versionId=v2 (current)", ledger.Ignored,
		[]event.Event{versionEvent("ObjectRemoved:Delete", "04", "v2", "")}, event.Created, "v2")
	// The sequencer moved on: an older event is stale.
	check("late event older than the deletion", ledger.Stale, []event.Event{put("02", "v2")}, event.Created, "v2")
	// The audit lists v0 (written before everything above) and resubmits it:
	// accepted, not judged older than v2's event.
	audit := event.Event{Bucket: "b", Key: "k", VersionID: "v0", ETag: "etag-v0", Kind: event.Created, Name: event.AuditPrefix + "Changed",
		Time: time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC), Format: event.FormatAudit}
	check("audit resubmission of v0", ledger.Accepted, []event.Event{audit}, event.Created, "v0")
	drain(t, ctx, l, map[string][]string{})

	// A delete marker, then the marker deleted by its id: content is back.
	check("delete marker", ledger.Accepted, []event.Event{versionEvent("ObjectRemoved:DeleteMarkerCreated", "05", "m1", "")}, event.Removed, "m1")
	drain(t, ctx, l, map[string][]string{})
	check("DELETE ?versionId=m1 (the marker)", ledger.Ignored,
		[]event.Event{versionEvent("ObjectRemoved:Delete", "06", "m1", "")}, event.Removed, "m1")
	audit.Time = time.Date(2025, 12, 2, 0, 0, 0, 0, time.UTC)
	check("audit resubmission of v0 after the marker went", ledger.Accepted, []event.Event{audit}, event.Created, "v0")
	drain(t, ctx, l, map[string][]string{})

	// MinIO announces the deletion of a delete marker as DeleteMarkerCreated
	// again, with the marker's version id: the same marker cannot be placed
	// twice, so it is the marker's removal, not the key's.
	check("delete marker m2", ledger.Accepted, []event.Event{versionEvent("ObjectRemoved:DeleteMarkerCreated", "07", "m2", "")}, event.Removed, "m2")
	drain(t, ctx, l, map[string][]string{})
	check("redelivery of m2's event", ledger.Duplicate, []event.Event{versionEvent("ObjectRemoved:DeleteMarkerCreated", "07", "m2", "")}, event.Removed, "m2")
	check("MinIO: DeleteMarkerCreated m2 again (m2 deleted)", ledger.Ignored,
		[]event.Event{versionEvent("ObjectRemoved:DeleteMarkerCreated", "08", "m2", "")}, event.Removed, "m2")
	if cs := must(l.Claim(ctx, 10, time.Minute))(t); len(cs) != 0 {
		t.Fatalf("a delete marker's deletion made work: %+v", cs)
	}
	audit.Time = time.Date(2025, 12, 3, 0, 0, 0, 0, time.UTC)
	check("audit resubmission of v0 after m2 went", ledger.Accepted, []event.Event{audit}, event.Created, "v0")
	// In a bucket whose versioning is suspended every marker is "null".
	for _, seq := range []string{"09", "10"} {
		drain(t, ctx, l, map[string][]string{})
		check("delete marker null "+seq, ledger.Accepted, []event.Event{versionEvent("ObjectRemoved:DeleteMarkerCreated", seq, "null", "")}, event.Removed, "null")
	}

	// A key the ledger never saw: a version's removal makes no record.
	if got := outcomes(must(l.Record(ctx, "s", []event.Event{{Bucket: "b", Key: "other", VersionID: "v9", Kind: event.Removed,
		Name: "ObjectRemoved:Delete", Sequencer: "01", VersionOnly: true, Format: event.FormatS3}}))(t)); got[0] != ledger.Ignored {
		t.Fatalf("a version's removal for an unknown key: %v", got)
	}
	if rs, err := l.Get(ctx, "b", "other"); err == nil {
		t.Fatalf("a version's removal made a record: %+v", rs)
	}

	// With work per version, the removal of v1 is exactly that.
	lv, _ := h.New(t, &ledger.Options{EveryVersion: true})
	must(lv.Record(ctx, "s", []event.Event{put("01", "v1"), put("02", "v2")}))(t)
	drain(t, ctx, lv, map[string][]string{})
	ds := must(lv.Record(ctx, "s", []event.Event{versionEvent("LifecycleExpiration:Delete", "03", "v1", "")}))(t)
	if ds[0].Outcome != ledger.Accepted {
		t.Fatalf("every version: removal of v1: %v, want new", outcomes(ds))
	}
	cs := must(lv.Claim(ctx, 10, time.Minute))(t)
	if len(cs) != 1 || cs[0].VersionID != "v1" || cs[0].Kind != event.Removed {
		t.Fatalf("every version: claims %+v, want v1's removal", cs)
	}
}

// testTokensAcrossVersions: with work kept per version, each version has its
// own record, and a fence at the handler's target keeps the key's highest
// token: the key's next version starts above the earlier one's tokens (it
// started at 1 again, refused there once the earlier version had been
// claimed twice), given that time passes between claims as it does.
func testTokensAcrossVersions(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{EveryVersion: true, Now: clk.Now})
	put := func(seq, ver string) event.Event { return versionEvent("ObjectCreated:Put", seq, ver, "etag-"+ver) }
	must(l.Record(ctx, "s", []event.Event{put("01", "v1"), put("02", "v2")}))(t)
	var highest int64
	for i, want := range []string{"v1", "v1", "v2"} {
		clk.Add(time.Second)
		cs := must(l.Claim(ctx, 10, time.Minute))(t)
		if len(cs) != 1 || cs[0].VersionID != want || cs[0].Token <= highest {
			t.Fatalf("claim %d: %+v, want %s with a token above %d, the key's highest so far", i+1, cs, want, highest)
		}
		highest = cs[0].Token
		var err error
		if i == 0 {
			err = l.Release(ctx, cs[0])
		} else {
			err = l.Complete(ctx, cs[0], "")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// testTokensAcrossVersionsClockBehind: with work kept per version, a
// version's first token starts above every token of the key's earlier
// versions even when it is claimed on a clock minutes behind the one that
// claimed them (another machine's): a fence at the target that saw the
// earlier tokens would refuse it for ever otherwise, each retry adding one.
// The clock goes back before each version is recorded and claimed: the
// second version, then an older one arriving late (oldest first runs it
// after the newer, already done).
func testTokensAcrossVersionsClockBehind(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{EveryVersion: true, Now: clk.Now})
	put := func(seq, ver string) event.Event { return versionEvent("ObjectCreated:Put", seq, ver, "etag-"+ver) }
	var highest int64
	claim := func(step, want string, release bool) {
		t.Helper()
		cs := must(l.Claim(ctx, 10, time.Minute))(t)
		if len(cs) != 1 || cs[0].VersionID != want || cs[0].Token <= highest {
			t.Fatalf("%s: claims %+v, want %s with a token above %d, the key's highest so far", step, cs, want, highest)
		}
		highest = cs[0].Token
		var err error
		if release {
			err = l.Release(ctx, cs[0])
		} else {
			err = l.Complete(ctx, cs[0], "")
		}
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	must(l.Record(ctx, "s", []event.Event{put("02", "v2")}))(t)
	claim("v2's first claim", "v2", true)
	claim("v2's second claim", "v2", false)
	for _, v := range []struct{ seq, ver string }{{"03", "v3"}, {"01", "v1"}} {
		clk.Add(-5 * time.Minute) // another claimer, whose clock is behind
		must(l.Record(ctx, "s", []event.Event{put(v.seq, v.ver)}))(t)
		claim(v.ver+"'s first claim, 5 minutes behind", v.ver, false)
	}
	// Two versions with one sequencer (a store that gives none, or a
	// resubmission): one at a time, or at least never with one token.
	must(l.Record(ctx, "s", []event.Event{put("04", "v4a"), put("04", "v4b")}))(t)
	seen := map[string]bool{}
	for i := 0; len(seen) < 2; i++ {
		cs := must(l.Claim(ctx, 10, time.Minute))(t)
		if len(cs) == 0 || i == 2 {
			t.Fatalf("versions with one sequencer: claims %+v after %v", cs, seen)
		}
		next := highest
		for _, c := range cs {
			if c.Token <= highest || seen[c.VersionID] {
				t.Fatalf("versions with one sequencer: claims %+v, want each version once with a token above %d, the key's highest before this claim", cs, highest)
			}
			seen[c.VersionID] = true
			next = max(next, c.Token)
		}
		for i, c := range cs {
			for _, d := range cs[:i] {
				if c.Token == d.Token {
					t.Fatalf("versions with one sequencer: claims %+v share token %d", cs, c.Token)
				}
			}
			if err := l.Complete(ctx, c, ""); err != nil {
				t.Fatal(err)
			}
		}
		highest = next
	}
}
