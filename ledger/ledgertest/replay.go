package ledgertest

// Replay and Purge.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

func testReplayPurge(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 1})
	must(l.Record(ctx, "s", []event.Event{ev("dead/a", "01"), ev("dead/b", "01"), ev("done/c", "01"), ev("wait/d", "01")}))(t)
	for _, c := range must(l.Claim(ctx, 10, time.Minute))(t) {
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
	if n := must(l.Replay(ctx, ledger.Selection{DryRun: true}))(t); n != 2 {
		t.Fatalf("dry-run replay of dead letters: %d, want 2", n)
	}
	if n := must(l.Replay(ctx, ledger.Selection{Bucket: "b", Key: "dead/a"}))(t); n != 1 {
		t.Fatalf("replay of one key: %d", n)
	}
	if _, err := l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Pending}}); err == nil {
		t.Fatal("replaying pending work must be refused")
	}
	r := must(l.Get(ctx, "b", "dead/a"))(t)[0]
	if r.Status != ledger.Pending || r.Replays != 1 || r.Attempts != 0 || r.Seq != "01" || r.Seen != 1 {
		t.Fatalf("after replay: %+v (a replay is counted as such, not as a delivery)", r)
	}
	cs := must(l.Claim(ctx, 10, time.Minute))(t)
	if len(cs) != 2 { // dead/a replayed, wait/d pending
		t.Fatalf("claimable after replay: %+v", cs)
	}
	for _, c := range cs {
		if err := l.Complete(ctx, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := must(l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{ledger.Processed}, Prefix: "done/"}))(t); n != 1 {
		t.Fatalf("replay of processed work under a prefix: %d", n)
	}
	// Purge: only finished records older than the horizon; never pending work.
	clk.Add(48 * time.Hour)
	must(l.Record(ctx, "s", []event.Event{ev("fresh/e", "01")}))(t)
	n := must(l.Purge(ctx, clk.Now().Add(-24*time.Hour), false))(t)
	if n != 2 { // dead/a and wait/d (processed); done/c is pending again, dead/b dead
		t.Fatalf("purged %d, want 2", n)
	}
	if _, err := l.Get(ctx, "b", "dead/b"); err != nil {
		t.Fatalf("a dead letter was purged without being asked: %v", err)
	}
	if n := must(l.Purge(ctx, clk.Now().Add(-24*time.Hour), true))(t); n != 1 {
		t.Fatalf("purge with dead letters: %d, want 1", n)
	}
	c := must(l.Counts(ctx))(t)
	if c[ledger.Pending] != 2 {
		t.Fatalf("pending work was purged: %v", c)
	}
	// done/c has waited since its replay, fresh/e since it arrived.
	if got := must(l.OldestPending(ctx))(t); !got.Equal(clk.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("OldestPending = %v, want %v", got, clk.Now().Add(-48*time.Hour))
	}
}

// testTokensAfterPurge: a key's fencing tokens never go backwards, also when
// its record is purged and a newer event makes it again. A fence at the
// handler's target keeps the key's highest token: a new record that counted
// from 1 again would be refused there for ever (its work retried into a dead
// letter), and a fence reset for it would let a stale holder of the purged
// record through. And Purge refuses an age under ledger.MinPurgeAge, on which
// that rests, deleting nothing.
func testTokensAfterPurge(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 10})
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))(t)
	// Four claims of the record: released, failed, its lease run out,
	// completed.
	var highest int64
	for i := range 4 {
		cs := must(l.Claim(ctx, 1, time.Minute))(t)
		if len(cs) != 1 || cs[0].Key != "k" || cs[0].Token <= highest {
			t.Fatalf("claim %d: %+v, want k with a token above %d", i+1, cs, highest)
		}
		c := cs[0]
		highest = c.Token
		var err error
		switch i {
		case 0:
			err = l.Release(ctx, c)
		case 1:
			err = l.Fail(ctx, c, "boom", true)
			clk.Add(time.Hour) // past its retry time
		case 2:
			clk.Add(2 * time.Minute) // past its lease
		case 3:
			err = l.Complete(ctx, c, "done")
		}
		if err != nil {
			t.Fatalf("claim %d (token %d): %v", i+1, c.Token, err)
		}
	}
	clk.Add(48 * time.Hour)
	for _, ago := range []time.Duration{0, time.Minute, ledger.MinPurgeAge - time.Minute} {
		n, err := l.Purge(ctx, time.Now().Add(-ago), true)
		if err == nil || n != 0 || !strings.Contains(err.Error(), "fencing token") {
			t.Fatalf("purge of records updated up to %s ago: %d, %v; want nothing purged and an error naming fencing tokens", ago, n, err)
		}
	}
	if rs := must(l.Lookup(ctx, "b", []string{"k"}))(t); len(rs) != 1 {
		t.Fatalf("a refused purge deleted k: %v", rs)
	}
	if n := must(l.Purge(ctx, clk.Now().Add(-24*time.Hour), false))(t); n != 1 {
		t.Fatalf("purged %d, want 1 (k)", n)
	}
	if _, err := l.Get(ctx, "b", "k"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("k after its purge: %v, want ErrNotFound", err)
	}
	// The key again, by a newer event: its first claim is above every token
	// the purged record gave, and the next counts up from there.
	if ds := must(l.Record(ctx, "s", []event.Event{ev("k", "02")}))(t); ds[0].Outcome != ledger.Accepted {
		t.Fatalf("k after its purge: %+v, want accepted", ds)
	}
	cs := must(l.Claim(ctx, 1, time.Minute))(t)
	if len(cs) != 1 || cs[0].Key != "k" || cs[0].Token <= highest {
		t.Fatalf("k's first claim after its record was purged: %+v, want a token above %d, the highest its purged record gave (a fence that kept it refuses any lower one)", cs, highest)
	}
	clk.Add(2 * time.Minute)
	again := must(l.Claim(ctx, 1, time.Minute))(t)
	if len(again) != 1 || again[0].Token != cs[0].Token+1 {
		t.Fatalf("takeover after the lease ran out: %+v, want token %d", again, cs[0].Token+1)
	}
	if err := l.Complete(ctx, again[0], ""); err != nil {
		t.Fatal(err)
	}
}
