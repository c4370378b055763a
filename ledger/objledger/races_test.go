package objledger

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func rev(key, seq, ver string) event.Event {
	return event.Event{Bucket: "b", Key: key, VersionID: ver, Sequencer: seq, Kind: event.Created,
		Name: "ObjectCreated:Put", ETag: "e" + seq, Format: event.FormatS3}
}

// keyIn returns a key of shard s (of n).
func keyIn(prefix string, s, n, skip int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s%04d", prefix, i)
		if shardOf("b", k, n) == s {
			if skip == 0 {
				return k
			}
			skip--
		}
	}
}

// With EveryVersion, versions of a hot key blocked behind a claimed one are
// "due" (dueBy counts them) but not claimable: a Claim's later rounds must
// not give them the whole budget and leave the other shard's claimable work
// unclaimed (they did, about half the time, by the shuffle; found in review).
func TestBlockedVersionsDoNotStarveOtherShards(t *testing.T) {
	ctx := context.Background()
	l, err := Open(ctx, objstore.New(mem.OpenBackend(""), nil), &ledger.Options{EveryVersion: true}, &Options{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hot := keyIn("hot", 0, 2, 0)
	var evs []event.Event
	for v := 1; v <= 20; v++ {
		evs = append(evs, rev(hot, fmt.Sprintf("%02d", v), fmt.Sprintf("v%02d", v)))
	}
	if _, err := l.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	if cs, err := l.Claim(ctx, 1, time.Hour); err != nil || len(cs) != 1 { // hot v01: the rest are blocked
		t.Fatalf("%v %v", cs, err)
	}
	evs = nil
	for i := range 5 {
		evs = append(evs, rev(keyIn("cold", 1, 2, i), "01", "v1"))
	}
	if _, err := l.Record(ctx, "t", evs); err != nil {
		t.Fatal(err)
	}
	for trial := range 30 {
		cs, err := l.Claim(ctx, 5, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			t.Fatalf("trial %d: Claim(5) = 0 claims while shard 1 has 5 claimable records", trial)
		}
		for _, c := range cs {
			if err := l.Release(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A compaction reads the head (h0), writes the new segment with h0's rows,
// then swaps it in. A Purge between those steps of a row that only the head
// held deletes it from head.Rows outright (no tombstone: no segment held it),
// so the swapped-in segment brought it back (in List and Counts; and since
// format 3 derives work from the rows, a purged Failed record was claimed
// again). The swap now leaves a tombstone for it. Found in review.
func TestPurgeDuringCompactionStaysPurged(t *testing.T) {
	ctx := context.Background()
	var block atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	s := objstore.New(&pauseBase{Backend: mem.OpenBackend(""), hook: func(key string) {
		if strings.Contains(key, "/base-") && block.CompareAndSwap(true, false) {
			close(reached)
			<-release
		}
	}}, nil)
	var at atomic.Int64
	at.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	clock := func() time.Time { return time.UnixMilli(at.Load()) }
	quiet := slog.New(slog.DiscardHandler)
	l, err := Open(ctx, s, &ledger.Options{Now: clock}, &Options{Shards: 1, CompactAt: 100000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "t", []event.Event{rev("a", "01", ""), rev("b", "01", "")}); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 2, time.Hour)
	if err != nil || len(cs) != 2 {
		t.Fatalf("%v %v", cs, err)
	}
	for _, c := range cs {
		if err := l.Fail(ctx, c, "boom", true); err != nil { // failed, retried after a backoff
			t.Fatal(err)
		}
	}
	c, err := OpenBackend(ctx, s, &ledger.Options{Now: clock}, &Options{Shards: 1, CompactAt: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	block.Store(true)
	done := make(chan error, 1)
	go func() { done <- c.Compact(ctx, 0) }()
	<-reached
	at.Add(time.Second.Milliseconds())
	n, err := l.Purge(ctx, clock(), true)
	if err != nil || n != 2 {
		t.Fatalf("purged %d %v", n, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	at.Add(time.Hour.Milliseconds())
	fresh, err := Open(ctx, s, &ledger.Options{Now: clock}, &Options{Shards: 1, CompactAt: 100000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	got, err := fresh.Claim(ctx, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("claimed %d purged records (first %s/%s, attempts %d)", len(got), got[0].Bucket, got[0].Key, got[0].Attempts)
	}
}

// pauseBase calls hook before each Put.
type pauseBase struct {
	objstore.Backend
	hook func(key string)
}

func (p *pauseBase) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	p.hook(key)
	return p.Backend.Put(ctx, key, body, size, opts)
}
