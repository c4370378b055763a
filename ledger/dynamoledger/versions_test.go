package dynamoledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
)

// TestEveryVersionOneAtATime: with Options.EveryVersion, recorders deliver
// the versions of a few keys in random order (older ones late) while workers
// on two handles claim and complete: never are two versions of one key
// claimed at once.
func TestEveryVersionOneAtATime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := newTable(t)
	opts := &ledger.Options{EveryVersion: true}
	// Writes are delayed at random, so that a claimer's read of a key's
	// versions and its claim are far apart.
	slow := &http.Client{Transport: &delayer{base: &http.Transport{}, op: "DynamoDB_20120810.PutItem", max: 20 * time.Millisecond}}
	handles := []*ledger.Ledger{open(t, url, opts, slow), open(t, url, opts, slow)}
	const keys, versions, workers = 3, 24, 8
	var evs []event.Event
	for k := range keys {
		for v := range versions {
			evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k%d", k), VersionID: fmt.Sprintf("v%02d", v),
				Sequencer: fmt.Sprintf("%04X", v+1), Kind: event.Created, ETag: fmt.Sprint(v)})
		}
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	var mu sync.Mutex
	busy := map[string]string{} // key: the version claimed
	var violations []string
	done := 0
	var wg sync.WaitGroup
	recorded := make(chan struct{})
	wg.Go(func() {
		defer close(recorded)
		for i := 0; i < len(evs); i += 3 {
			if _, err := handles[i%2].Record(ctx, "s", evs[i:min(i+3, len(evs))]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range workers {
		wg.Go(func() {
			l := handles[w%2]
			for {
				cs, err := l.Claim(ctx, 2, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(cs) == 0 {
					select {
					case <-recorded:
						mu.Lock()
						finished := done == len(evs)
						mu.Unlock()
						if finished {
							return
						}
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, c := range cs {
					if v, ok := busy[c.Key]; ok {
						violations = append(violations, fmt.Sprintf("%s: %s claimed while %s is", c.Key, c.VersionID, v))
					}
					busy[c.Key] = c.VersionID
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				for _, c := range cs {
					delete(busy, c.Key)
				}
				mu.Unlock()
				for _, c := range cs {
					if err := l.Complete(ctx, c, ""); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					done++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d times two versions of a key were claimed at once, e.g. %s", len(violations), violations[0])
	}
	if done != len(evs) {
		t.Fatalf("%d versions processed, want %d", done, len(evs))
	}
}

// delayer delays the requests of one operation by up to max, at random.
type delayer struct {
	base *http.Transport
	op   string
	max  time.Duration
}

func (d *delayer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Amz-Target") == d.op {
		time.Sleep(rand.N(d.max))
	}
	return d.base.RoundTrip(req)
}

// gate holds the first request of an operation, once armed, until released.
type gate struct {
	base    *http.Transport
	mu      sync.Mutex
	op      string
	arrived chan struct{}
	release chan struct{}
}

func (g *gate) arm(op string) {
	g.mu.Lock()
	g.op, g.arrived, g.release = "DynamoDB_20120810."+op, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	hold := req.Header.Get("X-Amz-Target") == g.op
	var arrived, release chan struct{}
	if hold {
		g.op, arrived, release = "", g.arrived, g.release
	}
	g.mu.Unlock()
	if hold {
		close(arrived)
		<-release
	}
	return g.base.RoundTrip(req)
}

// TestEveryVersionRace: a claimer that read a key's versions (only a newer
// one, nothing to wait for) and whose claim is still on its way, and a
// claimer that meanwhile sees an older version arrive and claims it: only
// one of them may end up holding a version of the key.
func TestEveryVersionRace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := newTable(t)
	opts := &ledger.Options{EveryVersion: true}
	g := &gate{base: &http.Transport{}}
	t.Cleanup(g.base.CloseIdleConnections)
	slow, fast := open(t, url, opts, &http.Client{Transport: g}), open(t, url, opts, nil)
	v := func(seq string) event.Event {
		return event.Event{Bucket: "b", Key: "k", VersionID: "v" + seq, Sequencer: seq, Kind: event.Created, ETag: seq}
	}
	if _, err := fast.Record(ctx, "s", []event.Event{v("02")}); err != nil {
		t.Fatal(err)
	}
	g.arm("PutItem")
	var held []ledger.Claim
	errc := make(chan error, 1)
	go func() {
		cs, err := slow.Claim(ctx, 1, time.Minute)
		held = cs
		errc <- err
	}()
	<-g.arrived // the slow claimer's first write is on its way
	if _, err := fast.Record(ctx, "s", []event.Event{v("01")}); err != nil {
		t.Fatal(err)
	}
	cs, err := fast.Claim(ctx, 1, time.Minute)
	close(g.release)
	if err2 := <-errc; err != nil || err2 != nil {
		t.Fatal(err, err2)
	}
	all := append(cs, held...)
	if len(all) != 1 {
		t.Fatalf("%d versions of one key claimed at once: %+v", len(all), all)
	}
}

// A claim whose token is not above the last token the key's lock was taken
// with is refused the lock, even once that lock is given up: the claimer read
// the key's tokens before another claimer claimed (and finished) a version,
// and its token would not be above that claim's. Before, giving the lock up
// deleted it, and the lower token took it. (Found in review.)
func TestLockRefusesATokenNotAboveTheLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := open(t, newTable(t), &ledger.Options{EveryVersion: true}, nil)
	now := time.Now()
	if ok, err := dynamoledger.TakeLock(ctx, l, "b", "k", "v1", 100, now.Add(time.Minute), now); err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	dynamoledger.DropLock(ctx, l, "b", "k", "v1", 100)
	for _, tok := range []int64{50, 100} {
		if ok, err := dynamoledger.TakeLock(ctx, l, "b", "k", "v2", tok, now.Add(time.Minute), now); err != nil || ok {
			t.Fatalf("lock with token %d after one with 100: %v %v, want refused", tok, ok, err)
		}
	}
	if ok, err := dynamoledger.TakeLock(ctx, l, "b", "k", "v2", 101, now.Add(time.Minute), now); err != nil || !ok {
		t.Fatalf("lock with token 101: %v %v, want taken", ok, err)
	}
	// A retry of that write (its answer lost) passes too.
	if ok, err := dynamoledger.TakeLock(ctx, l, "b", "k", "v2", 101, now.Add(time.Minute), now); err != nil || !ok {
		t.Fatalf("the same lock again: %v %v, want taken", ok, err)
	}
}
