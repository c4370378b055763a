package objledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A compaction whose swap of the new base into the head failed ambiguously
// must not delete the new base: the swap may still land, and a head naming a
// deleted base makes the whole shard unreadable. Before, compact read the head
// at once, saw the old base (the swap had not landed yet) and deleted the new
// one; the late swap then landed.
func TestCompactionLateSwapKeepsBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var late atomic.Bool
	fb := faulty.New(mem.OpenBackend(""), &faulty.Options{LateDelay: 500 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if late.Load() && op == faulty.OpPut && strings.HasSuffix(key, "/head.json") {
			return faulty.LateApply, 0
		}
		return faulty.None, 0
	}})
	s := objstore.New(fb, nil)
	quiet := slog.New(slog.DiscardHandler)
	// A writer that never compacts, then a compactor with a low threshold.
	w, err := objledger.Open(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 100000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const keys = 40
	var evs []event.Event
	for k := range keys {
		evs = append(evs, ev(fmt.Sprintf("k/%03d", k), "01"))
	}
	if _, err := w.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	c, err := objledger.Open(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	late.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // gives up before the swap lands
	cerr := backendOf(c).Compact(cctx, 0)
	cancel()
	if cerr == nil {
		t.Fatal("compacted although every head write was late")
	}
	// The commit the compactor gave up on runs on, detached, and may send
	// one more write after the deadline (it took the update before): close
	// the compactor, which ends that commit, while every head write is still
	// late, so the swap that lands is a late one.
	c.Close()
	fb.Wait() // the late swap lands now (the first one; the rest fail their condition)
	late.Store(false)
	if st := fb.Stats(); st.LateLanded == 0 {
		t.Fatalf("no late swap landed: %+v", st)
	}
	fresh, err := objledger.Open(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 100000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for k := range keys {
		rs, err := fresh.Get(ctx, "b", fmt.Sprintf("k/%03d", k))
		if err != nil || len(rs) != 1 {
			t.Fatalf("k/%03d after a late compaction swap: %+v %v", k, rs, err)
		}
	}
	// The next compaction (by another process: the first one closed) finds
	// the late swap in place, and the shard stays readable.
	c, err = objledger.Open(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Record(ctx, "t", evs[:20]); err != nil {
		t.Fatal(err)
	}
	if err := backendOf(c).Compact(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Get(ctx, "b", "k/000"); err != nil {
		t.Fatal(err)
	}
}

// The conformance suite with late-landing writes mixed with lost requests and
// lost responses (5% each), with few shards and frequent compactions.
func TestConformanceLateLanding(t *testing.T) {
	var seed atomic.Uint64
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
		b := faulty.New(mem.OpenBackend(""), &faulty.Options{Seed: seed.Add(1), LateApplyRate: 0.05, LostResponseRate: 0.05, LostRequestRate: 0.05,
			LateJitter: 20 * time.Millisecond, Jitter: 300 * time.Microsecond})
		l, err := objledger.Open(context.Background(), objstore.New(b, nil), opts, &objledger.Options{Shards: 4, CompactAt: 16,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); b.Wait() })
		return l, ""
	}})
}

// TestCommittedRunsResults: when the write that commits is an earlier run's
// (its request landed late while a later run's was lost), the caller gets
// that run's results. Claim used to return the last run's claims, whose
// lease (and, with a changed head, tokens and keys) differ from what was
// stored: a worker settled claims the ledger never handed out, and the
// committed claim was held by nobody until its lease expired.
func TestCommittedRunsResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var armed atomic.Int64 // unix nanos when armed; 0: off
	var puts atomic.Int32
	fb := faulty.New(mem.OpenBackend(""), &faulty.Options{LateDelay: 50 * time.Millisecond, LateJitter: time.Millisecond,
		Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
			at := armed.Load()
			if at == 0 || op != faulty.OpPut || !strings.HasSuffix(key, "/head.json") {
				return faulty.None, 0
			}
			switch {
			case puts.Add(1) == 1:
				return faulty.LateApply, 0 // lands 50ms later
			case time.Since(time.Unix(0, at)) < 300*time.Millisecond:
				return faulty.LostRequest, 0 // later runs' writes are lost meanwhile
			}
			return faulty.None, 0
		}})
	var tick atomic.Int64
	clock := func() time.Time { return time.Unix(1_800_000_000+tick.Add(1), 0) } // every run sees another time
	l, err := objledger.Open(ctx, objstore.New(fb, nil), &ledger.Options{Now: clock},
		&objledger.Options{Shards: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close(); fb.Wait() }()
	if _, err := l.Record(ctx, "t", []event.Event{ev("k", "01")}); err != nil {
		t.Fatal(err)
	}
	armed.Store(time.Now().UnixNano())
	cs, err := l.Claim(ctx, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if puts.Load() < 2 {
		t.Fatalf("only %d head writes: the late-landing case was not reached", puts.Load())
	}
	if len(cs) != 1 {
		t.Fatalf("claimed %d, want 1", len(cs))
	}
	recs, err := l.Get(ctx, "b", "k")
	if err != nil || len(recs) != 1 {
		t.Fatal(recs, err)
	}
	if got, stored := cs[0], recs[0]; got.Token != stored.Token || !got.LeaseUntil.Equal(stored.LeaseUntil) {
		t.Fatalf("Claim returned token %d lease %v; the ledger holds token %d lease %v", got.Token, got.LeaseUntil, stored.Token, stored.LeaseUntil)
	}
	if err := l.Complete(ctx, cs[0], "ok"); err != nil {
		t.Fatalf("completing the claim Claim returned: %v", err)
	}
}

// A RecordAndClaim whose shard write failed must not release the claims it
// computed in that write: they were never written, and claims of the same
// rows by another process carry the same tokens (a row's next token), so
// releasing them released the other holder's live claim. Here the write is
// lost while another handle claims the due record; the failed call then
// released it, and the holder's Complete failed with its lease lost.
func TestFailedRecordDoesNotReleaseAnotherHoldersClaim(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	// One clock for both handles, moved on after the old record: it is due
	// before the new one, so the new one's claim (n = 1) takes it.
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	inner := mem.OpenBackend("")
	b, err := objledger.Open(ctx, objstore.New(inner, nil), &ledger.Options{Now: now}, &objledger.Options{Shards: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var armed atomic.Bool
	var bClaim ledger.Claim
	var bErr error
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	fb := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut && strings.HasSuffix(key, "/head.json") && armed.CompareAndSwap(true, false) {
			// B claims the due record while A's write is lost; then A gives up.
			var cs []ledger.Claim
			cs, bErr = b.Claim(ctx, 1, time.Minute)
			if bErr == nil && len(cs) == 1 {
				bClaim = cs[0]
			}
			cancelA()
			return faulty.LostRequest, 0
		}
		return faulty.None, 0
	}})
	a, err := objledger.Open(ctx, objstore.New(fb, nil), &ledger.Options{Now: now}, &objledger.Options{Shards: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := b.Record(ctx, "s", []event.Event{ev("old", "01")}); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(time.Second))
	armed.Store(true)
	if _, cs, err := a.RecordAndClaim(actx, "s", []event.Event{ev("new", "01")}, 1, time.Minute); err == nil {
		t.Fatalf("A's RecordAndClaim succeeded (%v): the fault did not fire", cs)
	}
	if bErr != nil || bClaim.Key != "old" {
		t.Fatalf("B's claim: %+v %v", bClaim, bErr)
	}
	rs, err := b.Get(ctx, "b", "old")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != ledger.Claimed || rs[0].Token != bClaim.Token {
		t.Errorf("old is %s with token %d: B's live claim (token %d) was released by A's failed RecordAndClaim", rs[0].Status, rs[0].Token, bClaim.Token)
	}
	if err := b.Complete(ctx, bClaim, "done"); err != nil {
		t.Errorf("B completes its own live claim: %v", err)
	}
}

// A note's write that lands late (its writer saw an error and wrote again,
// and a newer note was written after) must not put the older value back.
// Before, PutNote wrote unconditionally: its first attempt, landing after the
// newer note, replaced it; and its error stopped a caller that could simply
// have written again.
func TestLateNoteDoesNotReturn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var late atomic.Int32 // late-landing puts of the note still to inject
	fb := faulty.New(mem.OpenBackend(""), &faulty.Options{LateDelay: 300 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut && strings.HasSuffix(key, "meta/"+ledger.AuditNote+".json") && late.Add(-1) >= 0 {
			return faulty.LateApply, 0
		}
		return faulty.None, 0
	}})
	l, err := objledger.Open(ctx, objstore.New(fb, nil), nil, &objledger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	late.Store(1)
	if err := l.PutNote(ctx, ledger.AuditNote, []byte(`"old"`)); err != nil {
		t.Fatalf("a note whose first write landed late: %v (it may be written again)", err)
	}
	if err := l.PutNote(ctx, ledger.AuditNote, []byte(`"new"`)); err != nil {
		t.Fatal(err)
	}
	fb.Wait() // every late request has landed or been refused
	if got, err := l.Note(ctx, ledger.AuditNote); err != nil || string(got) != `"new"` {
		t.Fatalf("note after the late write: %s %v, want \"new\"", got, err)
	}
}
