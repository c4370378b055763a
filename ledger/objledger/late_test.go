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
	fb := faulty.New(mem.NewBackend(""), &faulty.Options{LateDelay: 500 * time.Millisecond, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if late.Load() && op == faulty.OpPut && strings.HasSuffix(key, "/head.json") {
			return faulty.LateApply, 0
		}
		return faulty.None, 0
	}})
	s := objstore.New(fb, nil)
	quiet := slog.New(slog.DiscardHandler)
	// A writer that never compacts, then a compactor with a low threshold.
	w, err := objledger.New(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 100000, Logger: quiet})
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
	c, err := objledger.New(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	late.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // gives up before the swap lands
	cerr := c.Compact(cctx, 0)
	cancel()
	late.Store(false)
	if cerr == nil {
		t.Fatal("compacted although every head write was late")
	}
	fb.Wait() // the late swap lands now (the first one; the rest fail their condition)
	if st := fb.Stats(); st.LateLanded == 0 {
		t.Fatalf("no late swap landed: %+v", st)
	}
	fresh, err := objledger.New(ctx, s, nil, &objledger.Options{Shards: 1, CompactAt: 100000, Logger: quiet})
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
	// The next compaction by the same process deletes what the unconfirmed
	// one left unused (nothing here: the swap landed), and the shard stays
	// readable.
	if _, err := c.Record(ctx, "t", evs[:20]); err != nil {
		t.Fatal(err)
	}
	if err := c.Compact(ctx, 0); err != nil {
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
	ledgertest.Run(t, ledgertest.Harness{New: func(t *testing.T, opts *ledger.Options) (ledger.Ledger, string) {
		b := faulty.New(mem.NewBackend(""), &faulty.Options{Seed: seed.Add(1), LateApplyRate: 0.05, LostResponseRate: 0.05, LostRequestRate: 0.05,
			LateJitter: 20 * time.Millisecond, Jitter: 300 * time.Microsecond})
		l, err := objledger.New(context.Background(), objstore.New(b, nil), opts, &objledger.Options{Shards: 4, CompactAt: 16,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); b.Wait() })
		return l, ""
	}})
}
