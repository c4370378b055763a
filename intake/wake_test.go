package intake_test

import (
	"context"
	"hash/fnv"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// gateBackend holds the first request for a key ending in key (once armed)
// until gate closes, and says when it holds it (hit).
type gateBackend struct {
	objstore.Backend
	armed atomic.Bool
	key   string
	hit   chan struct{}
	gate  chan struct{}
}

func (g *gateBackend) wait(key string) {
	if strings.HasSuffix(key, g.key) && g.armed.CompareAndSwap(true, false) {
		g.hit <- struct{}{}
		<-g.gate
	}
}
func (g *gateBackend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	g.wait(key)
	return g.Backend.Get(ctx, key)
}
func (g *gateBackend) Head(ctx context.Context, key string) (objstore.Info, error) {
	g.wait(key)
	return g.Backend.Head(ctx, key)
}
func (g *gateBackend) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	g.wait(key)
	return g.Backend.Put(ctx, key, body, size, opts)
}

// shard is objledger's shard of b/key among n.
func shard(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte("b"))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// keyIn is a key with prefix in shard s of n.
func keyIn(s, n int, prefix string) string {
	for i := 0; ; i++ {
		k := prefix + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		if shard(k, n) == s {
			return k
		}
	}
}

// TestWakeNotLostOnObjectStore: a wake the dispatcher cannot act on at once
// (no slot free) must not be spent. Found in review: the dispatcher took the
// record loop's wake for kB, found no slot, waited for one, and when a slot
// freed while a batch was recording, went back to its poll; that batch took
// the slot and claimed only its own kC (the object-store ledger claims in the
// shards a batch writes), so kB waited for the poll, an hour here.
func TestWakeNotLostOnObjectStore(t *testing.T) {
	t.Parallel()
	const shards = 4
	g := &gateBackend{Backend: mem.NewBackend(""), hit: make(chan struct{}), gate: make(chan struct{})}
	kA, kB, kC, kZ := keyIn(0, shards, "A"), keyIn(0, shards, "B"), keyIn(1, shards, "C"), keyIn(2, shards, "Z")
	g.key = "shards/002/head.json"
	l, err := objledger.Open(context.Background(), objstore.New(g, nil), nil, &objledger.Options{Shards: shards, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release := make(chan struct{})
	ran := make(chan string, 10)
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		if w.Event.Key == kA {
			<-release
		}
		ran <- w.Event.Key
		return "ok", nil
	}), &intake.Options{Concurrency: 1, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	ctx := context.Background()
	// kZ: recorded and run (so a resubmission is a duplicate).
	if _, err := p.Submit(ctx, "s1", []event.Event{ev(kZ, 1)}); err != nil {
		t.Fatal(err)
	}
	if k := <-ran; k != kZ {
		t.Fatalf("ran %s", k)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := p.Submit(ctx, "s1", []event.Event{ev(kA, 1)}); err != nil { // claimed by its record; HA blocks
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := p.Submit(ctx, "s1", []event.Event{ev(kB, 1)}); err != nil { // no slot: left, wake
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	// One batch: s1's duplicate (shard 2, read gated), then s2's kC (shard 1).
	g.armed.Store(true)
	go p.Submit(ctx, "s1", []event.Event{ev(kZ, 1)})
	<-g.hit
	go p.Submit(ctx, "s2", []event.Event{ev(kC, 1)})
	time.Sleep(50 * time.Millisecond)
	close(release) // HA done: slot frees while the loop records
	if k := <-ran; k != kA {
		t.Fatalf("ran %s", k)
	}
	time.Sleep(50 * time.Millisecond)
	close(g.gate)
	got := map[string]bool{}
	timeout := time.After(5 * time.Second)
	for len(got) < 2 {
		select {
		case k := <-ran:
			got[k] = true
		case <-timeout:
			t.Fatalf("ran %v; kB=%s, kC=%s: the rest waits for the poll (an hour)", got, kB, kC)
		}
	}
}
