package objledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// requests counts the reads and writes of the objects whose keys end in
// suffix, seen by faulty's Rule (which injects nothing here).
type requests struct {
	suffix     string
	gets, puts atomic.Int64
}

// store is a memory store whose calls r counts.
func (r *requests) store() *objstore.Store {
	return objstore.New(faulty.New(mem.OpenBackend(""), &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		switch {
		case !strings.HasSuffix(key, r.suffix):
		case op == faulty.OpGet:
			r.gets.Add(1)
		case op == faulty.OpPut:
			r.puts.Add(1)
		}
		return faulty.None, 0
	}}), nil)
}

// indexDue reads the shards the work index has entries for.
func indexDue(ctx context.Context, s *objstore.Store) (map[string]int64, []byte, error) {
	var doc struct {
		Value struct {
			Due map[string]int64 `json:"due"`
		} `json:"value"`
	}
	data, _, err := s.GetBytes(ctx, "work.json")
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	return doc.Value.Due, data, err
}

// A CompleteBatch made with ledger.WithLinger waits, while its shard is
// idle, for the next urgent write of the shard (a Record's) and rides in it:
// one head write for both. Before, the two alternated, write for write.
func TestLingeringCompletionRidesWithRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &requests{suffix: "/head.json"}
	l, err := objledger.Open(ctx, b.store(), nil, &objledger.Options{Shards: 1, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, cs, err := l.RecordAndClaim(ctx, "t", []event.Event{ev("k1", "01")}, 1, time.Hour)
	if err != nil || len(cs) != 1 {
		t.Fatalf("RecordAndClaim: %d claims, %v", len(cs), err)
	}
	before := b.puts.Load()
	done := make(chan error, 1)
	go func() {
		errs, err := l.CompleteBatch(ledger.WithLinger(ctx, time.Hour), cs, []string{"r"})
		if err == nil {
			err = errs[0]
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a lingering completion returned (%v) with nothing urgent to ride with", err)
	default:
	}
	if got := b.puts.Load() - before; got != 0 {
		t.Fatalf("a lingering completion wrote the head %d times with nothing urgent to ride with", got)
	}
	if _, err := l.Record(ctx, "t", []event.Event{ev("k2", "01")}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := b.puts.Load() - before; got != 1 {
		t.Fatalf("a Record and a lingering completion took %d head writes, want 1", got)
	}
	recs, err := l.Get(ctx, "b", "k1")
	if err != nil || len(recs) != 1 || recs[0].Status != ledger.Processed || recs[0].Result != "r" {
		t.Fatalf("k1 after the completion: %+v, %v", recs, err)
	}
}

// RecordAndClaim(n) claims, beyond the batch's own records, work earlier
// batches left unclaimed in the shards it writes (the earliest due first),
// up to n: the pipeline passes every free slot, and work a busy pipeline left
// is then taken by its next batches, not by a Claim of its own.
func TestRecordAndClaimTakesLeftWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock, advance := testClock()
	l, err := objledger.Open(ctx, objstore.New(mem.OpenBackend(""), nil), &ledger.Options{Now: clock}, &objledger.Options{Shards: 1, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "t", []event.Event{ev("old1", "01"), ev("old2", "01"), ev("old3", "01")}); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	_, cs, err := l.RecordAndClaim(ctx, "t", []event.Event{ev("new", "01")}, 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, c.Key)
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "old1,old2,old3" {
		t.Fatalf("RecordAndClaim(1 event, n=3) claimed %v, want the three older records (earliest due first)", got)
	}
}

// The index updates that Records leave to the hinter wait out its linger,
// so that the Records that follow share one: none is made while it lasts
// (before, each Record's was made at once, a read of the index each). This
// process's Claims find the hinted work meanwhile, and Close writes the
// hints at once.
func TestRecordsShareAnIndexUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &requests{suffix: "work.json"}
	s := b.store()
	l, err := objledger.OpenBackend(ctx, s, nil, &objledger.Options{Shards: 4, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	objledger.SetHintWait(l, time.Hour)
	gets, puts := b.gets.Load(), b.puts.Load()
	for i := range 20 {
		if _, _, err := l.RecordAndClaim(ctx, "t", []event.Event{ev(fmt.Sprintf("k%d", i), "01")}, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // time enough for an eager hinter
	if g, p := b.gets.Load()-gets, b.puts.Load()-puts; g != 0 || p != 0 {
		t.Fatalf("20 Records made %d reads and %d writes of the index within the linger", g, p)
	}
	for i := range 20 {
		if _, _, err := l.RecordAndClaim(ctx, "t", []event.Event{ev(fmt.Sprintf("j%d", i), "01")}, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if p := b.puts.Load() - puts; p != 1 {
		t.Fatalf("Close wrote the index %d times, want once, with every hint", p)
	}
	due, data, err := indexDue(ctx, s)
	if err != nil || len(due) != 4 {
		t.Fatalf("the index after Close: %s (%v), want an entry for each of the 4 shards", data, err)
	}
}

// While the hinter lingers, a Claim in the same process finds the work the
// Records left (it visits the shards still to be hinted), and once the
// linger is over the index holds the hints without a Close.
func TestHintedWorkFoundAndWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, wait := range []time.Duration{time.Hour, 10 * time.Millisecond} {
		s := objstore.New(mem.OpenBackend(""), nil)
		l, err := objledger.OpenBackend(ctx, s, nil, &objledger.Options{Shards: 4, SweepEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		objledger.SetHintWait(l, wait)
		if _, err := l.Claim(ctx, 1, time.Minute); err != nil { // the first Claim's sweep
			t.Fatal(err)
		}
		var evs []event.Event
		for i := range 12 {
			evs = append(evs, ev(fmt.Sprintf("k%d", i), "01"))
		}
		if _, _, err := l.RecordAndClaim(ctx, "t", evs, 0, time.Minute); err != nil {
			t.Fatal(err)
		}
		if wait == time.Hour {
			cs, err := l.Claim(ctx, 100, time.Minute)
			if err != nil || len(cs) != len(evs) {
				t.Fatalf("a Claim during the linger: %d claims (%v), want %d", len(cs), err, len(evs))
			}
			continue
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			due, data, err := indexDue(ctx, s)
			if err == nil && len(due) == 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the index after the linger: %s (%v), want an entry for each of the 4 shards", data, err)
			}
		}
	}
}

// A ledger created with no shard count has two: a small batch touches every
// shard, and each shard it touches costs a write (see defaultShards).
func TestDefaultShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(mem.OpenBackend(""), nil)
	l, err := objledger.OpenBackend(ctx, s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	data, _, err := s.GetBytes(ctx, "cairn-ledger.json")
	var doc struct {
		Value struct {
			Shards int `json:"shards"`
		} `json:"value"`
	}
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil || doc.Value.Shards != 2 {
		t.Fatalf("a new ledger's descriptor: %s (%v), want 2 shards", data, err)
	}
}

// An existing ledger keeps the shard count it was created with, whatever the
// opener asks for: a new default (or a different shards=N) must not move
// keys to other shards.
func TestReopenKeepsShardCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(mem.OpenBackend(""), nil)
	l, err := objledger.OpenBackend(ctx, s, nil, &objledger.Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	for i := range 40 {
		evs = append(evs, ev(fmt.Sprintf("k%d", i), "01"))
	}
	if _, _, err := l.RecordAndClaim(ctx, "t", evs, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*objledger.Options{nil, {Shards: 2}} {
		l, err := objledger.OpenBackend(ctx, s, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		if n := l.Shards(); n != 4 {
			t.Errorf("reopened with %+v: %d shards, want the 4 it was created with", o, n)
		}
		ds, _, err := l.RecordAndClaim(ctx, "t", evs, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Outcome != ledger.Duplicate {
				t.Errorf("reopened with %+v: %s/%s decided %s, want a duplicate (found in its shard)", o, d.Bucket, d.Key, d.Outcome)
			}
		}
		l.Close()
	}
}
