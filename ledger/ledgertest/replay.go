package ledgertest

// Replay and Purge.

import (
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
