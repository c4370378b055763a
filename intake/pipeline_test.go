package intake_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

func newLedger(t *testing.T, opts *ledger.Options) ledger.Ledger {
	t.Helper()
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func ev(key string, seq int) event.Event {
	return event.Event{Bucket: "b", Key: key, Sequencer: fmt.Sprintf("%016X", seq), Kind: event.Created,
		Name: "ObjectCreated:Put", ETag: fmt.Sprintf("etag-%d", seq), Format: event.FormatS3}
}

// start runs p until the test ends and returns a stop function that waits.
func start(t *testing.T, p *intake.Pipeline) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// handled records what a handler saw, and checks that no key runs twice at
// once and that a key's sequencers only grow.
type handled struct {
	mu      sync.Mutex
	active  map[string]bool
	last    map[string]string
	runs    map[string]int // key@seq → runs
	overlap atomic.Int64
	regress atomic.Int64
}

func newHandled() *handled {
	return &handled{active: map[string]bool{}, last: map[string]string{}, runs: map[string]int{}}
}

func (h *handled) enter(w intake.Work) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := w.Event.Key
	if h.active[k] {
		h.overlap.Add(1)
	}
	h.active[k] = true
	if prev, ok := h.last[k]; ok && event.CompareSequencer(w.Event.Sequencer, prev) < 0 {
		h.regress.Add(1)
	}
	h.last[k] = w.Event.Sequencer
	h.runs[k+"@"+w.Event.Sequencer]++
}

func (h *handled) leave(w intake.Work) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.active, w.Event.Key)
}

// TestStorm: 32 goroutines deliver a duplicate and reordering storm; every key
// ends with its newest event handled, never two handlers for a key at once,
// never an older event after a newer one.
func TestStorm(t *testing.T) {
	l := newLedger(t, nil)
	h := newHandled()
	p, err := intake.New(intake.Options{Ledger: l, Concurrency: 8, Poll: 20 * time.Millisecond,
		Handler: intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
			h.enter(w)
			defer h.leave(w)
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			return "ok", nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)
	const keys, versions = 50, 4
	var evs []event.Event
	for k := range keys {
		for v := 1; v <= versions; v++ {
			for range 1 + rand.IntN(3) {
				evs = append(evs, ev(fmt.Sprintf("k%03d", k), v))
			}
		}
	}
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	var wg sync.WaitGroup
	ch := make(chan event.Event)
	for range 32 {
		wg.Go(func() {
			for e := range ch {
				if _, err := p.Submit(context.Background(), "test", []event.Event{e}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for _, e := range evs {
		ch <- e
	}
	close(ch)
	wg.Wait()
	waitFor(t, func() bool {
		c, err := l.Counts(context.Background())
		return err == nil && c[ledger.Processed] == keys
	})
	stop()
	if n := h.overlap.Load(); n != 0 {
		t.Errorf("%d times a key's handler ran while another ran for it", n)
	}
	if n := h.regress.Load(); n != 0 {
		t.Errorf("%d times an older event ran after a newer one", n)
	}
	for k := range keys {
		key := fmt.Sprintf("k%03d", k)
		if h.last[key] != ev(key, versions).Sequencer {
			t.Errorf("%s: last handled %s, want the newest", key, h.last[key])
		}
	}
	for kv, n := range h.runs {
		if n > 1 {
			t.Errorf("%s handled %d times", kv, n)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOutcomes: a retryable error is retried, a permanent one is dead at once,
// a panic is a retryable error.
func TestOutcomes(t *testing.T) {
	l := newLedger(t, &ledger.Options{RetryBase: time.Millisecond, RetryMax: time.Millisecond, MaxAttempts: 3})
	var mu sync.Mutex
	attempts := map[string]int{}
	p, err := intake.New(intake.Options{Ledger: l, Poll: 5 * time.Millisecond,
		Handler: intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
			mu.Lock()
			attempts[w.Event.Key]++
			n := attempts[w.Event.Key]
			mu.Unlock()
			switch w.Event.Key {
			case "flaky":
				if n < 3 {
					return "", errors.New("try again")
				}
			case "bad":
				return "", intake.Permanent(errors.New("cannot parse"))
			case "panics":
				panic("boom")
			}
			return "done", nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("flaky", 1), ev("bad", 1), ev("panics", 1), ev("fine", 1)}); err != nil {
		t.Fatal(err)
	}
	status := func(key string) ledger.Record {
		rs, err := l.Get(context.Background(), "b", key)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	waitFor(t, func() bool {
		return status("flaky").Status == ledger.Processed && status("bad").Status == ledger.Dead &&
			status("panics").Status == ledger.Dead && status("fine").Status == ledger.Processed
	})
	mu.Lock()
	defer mu.Unlock()
	if attempts["bad"] != 1 || attempts["flaky"] != 3 || attempts["panics"] != 3 {
		t.Fatalf("attempts: %v, want bad 1, flaky 3, panics 3", attempts)
	}
	if r := status("panics"); r.LastError == "" {
		t.Fatalf("dead letter without its error: %+v", r)
	}
	if r := status("fine"); r.Result != "done" {
		t.Fatalf("result not stored: %+v", r)
	}
}

// flakyRenew is a real ledger whose renewals fail with ErrUnavailable while
// blocked: fault injection for a worker cut off from the ledger.
type flakyRenew struct {
	ledger.Ledger
	blocked atomic.Bool
}

func (f *flakyRenew) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	if f.blocked.Load() {
		return c, ledger.ErrUnavailable
	}
	return f.Ledger.Renew(ctx, c, lease)
}

// TestLeaseLost: a worker cut off from the ledger loses its lease; the work is
// claimed again with a higher token; when the first worker reconnects its
// renewal is refused, its handler's context is cancelled, and its result is
// dropped, so the second holder's is the one recorded.
func TestLeaseLost(t *testing.T) {
	l := &flakyRenew{Ledger: newLedger(t, nil)}
	l.blocked.Store(true)
	outcomes := make(chan string, 4)
	p, err := intake.New(intake.Options{Ledger: l, Lease: 300 * time.Millisecond, Poll: 10 * time.Millisecond,
		Handler: intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
			if w.Token == 1 {
				<-ctx.Done() // stalls until its lease is known lost
				return "stale holder", nil
			}
			l.blocked.Store(false) // the first worker reconnects
			return "second holder", nil
		}),
		OnOutcome: func(w intake.Work, outcome string, err error) { outcomes <- fmt.Sprint(w.Token, " ", outcome) },
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{<-outcomes: true, <-outcomes: true}
	if !got["2 processed"] || !got["1 lease_lost"] {
		t.Fatalf("outcomes %v, want token 2 processed and token 1 lease_lost", got)
	}
	rs, err := l.Get(context.Background(), "b", "k")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != ledger.Processed || rs[0].Result != "second holder" || rs[0].Token != 2 {
		t.Fatalf("record: %+v", rs[0])
	}
}

// TestShutdownReleases: at shutdown a handler that does not finish within the
// grace period is cancelled and its work released, uncounted, for the next run.
func TestShutdownReleases(t *testing.T) {
	l := newLedger(t, nil)
	started := make(chan struct{})
	p, err := intake.New(intake.Options{Ledger: l, Grace: 50 * time.Millisecond,
		Handler: intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		})})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	rs, err := l.Get(context.Background(), "b", "k")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != ledger.Pending || rs[0].Attempts != 0 {
		t.Fatalf("after shutdown: %+v, want pending with no attempt counted", rs[0])
	}
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 2)}); !errors.Is(err, intake.ErrClosed) {
		t.Fatalf("Submit after Run returned: %v, want ErrClosed", err)
	}
	// The next pipeline picks the work up.
	done := make(chan struct{})
	p2, _ := intake.New(intake.Options{Ledger: l, Handler: intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		close(done)
		return "", nil
	})})
	start(t, p2)
	<-done
}
