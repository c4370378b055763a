package objledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Compaction moves a head's rows into tiers of immutable segments: the head
// stays small, and what every record says is the same before and after,
// purged records (tombstones in a newer segment over rows of the base)
// included.
func TestSegmentTiers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	clock, advance := testClock()
	l, err := objledger.Open(ctx, s, &ledger.Options{Now: clock}, &objledger.Options{Shards: 1, CompactAt: 8, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := map[string]string{} // key → newest sequencer, for live records
	var all []string
	maxSegs := 0
	// round records keys with sequencer seq, processes them, compacts, and
	// checks the head and every record.
	round := func(keys []string, seq string) {
		t.Helper()
		advance(time.Minute)
		var evs []event.Event
		for _, k := range keys {
			if _, ok := want[k]; !ok {
				all = append(all, k)
			}
			evs = append(evs, ev(k, seq))
			want[k] = seq
		}
		if _, err := l.Record(ctx, "t", evs); err != nil {
			t.Fatal(err)
		}
		cs, err := l.Claim(ctx, len(keys), time.Minute)
		if err != nil || len(cs) != len(keys) {
			t.Fatalf("claimed %d of %d: %v", len(cs), len(keys), err)
		}
		if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
			t.Fatal(err)
		}
		check(t, ctx, l, s, all, want, &maxSegs)
	}
	keys := func(prefix string, from, to int) []string {
		var ks []string
		for i := from; i < to; i++ {
			ks = append(ks, fmt.Sprintf("%s/%03d", prefix, i))
		}
		return ks
	}
	round(keys("big", 0, 200), "01")
	round(keys("big", 8, 200), "02") // big/000-007 are now the oldest
	cut := clock()
	for r := range 10 {
		round(keys("k", r*8, r*8+10), fmt.Sprintf("%02d", r+3)) // new keys and overwrites
		if r == 4 {
			// Purge big/000-007: tombstones in the head over rows of the base,
			// compacted with the next rounds into a segment that is not the
			// base (the base is much larger).
			n, err := l.Purge(ctx, cut, true)
			if err != nil || n != 8 {
				t.Fatalf("purged %d, %v; want 8", n, err)
			}
			for _, k := range keys("big", 0, 8) {
				delete(want, k)
			}
			check(t, ctx, l, s, all, want, &maxSegs)
		}
	}
	if maxSegs < 1 {
		t.Errorf("no segment above the base: the test must see tiers")
	}
}

// check compacts shard 0 and checks that its head is small and that every
// key reads as want says (keys not in want were purged).
func check(t *testing.T, ctx context.Context, l *ledger.Ledger, s *objstore.Store, all []string, want map[string]string, maxSegs *int) {
	t.Helper()
	var env struct {
		Value struct {
			Segs []string       `json:"segs"`
			Rows map[string]any `json:"rows"`
		} `json:"value"`
	}
	// A background compaction may win the race with this one, and leave the
	// rows written after it read the head: compact again then.
	for attempt := 0; ; attempt++ {
		if err := backendOf(l).Compact(ctx, 0); err != nil {
			t.Fatal(err)
		}
		data, _, err := s.GetBytes(ctx, "shards/000/head.json")
		if err != nil {
			t.Fatal(err)
		}
		env.Value.Segs, env.Value.Rows = nil, nil // Unmarshal merges into a map
		if err := json.Unmarshal(data, &env); err != nil {
			t.Fatalf("head: %v", err)
		}
		if n := len(env.Value.Rows); n <= 8 {
			break
		} else if attempt == 10 {
			t.Fatalf("the head holds %d rows after compaction (CompactAt 8)", n)
		}
	}
	*maxSegs = max(*maxSegs, len(env.Value.Segs))
	for _, key := range all {
		rs, err := l.Get(ctx, "b", key)
		seq, live := want[key]
		switch {
		case !live && err == nil:
			t.Fatalf("%s was purged and is back: %+v", key, rs)
		case live && (err != nil || len(rs) != 1 || rs[0].Seq != seq || rs[0].Status != ledger.Processed):
			t.Fatalf("%s: %+v, %v; want sequencer %s, processed", key, rs, err, seq)
		}
	}
	counts, err := l.Counts(ctx)
	if err != nil || counts[ledger.Processed] != len(want) || len(counts) != 1 {
		t.Fatalf("counts %v, %v; want %d processed", counts, err, len(want))
	}
}
