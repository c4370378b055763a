package intake_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/ledger"
)

func newLedger(t *testing.T, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	return testledger.New(t, opts)
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
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		h.enter(w)
		defer h.leave(w)
		time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		return "ok", nil
	}), &intake.Options{Concurrency: 8, Poll: 20 * time.Millisecond})
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
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
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
	}), &intake.Options{Poll: 5 * time.Millisecond})
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
	ledger.Backend
	blocked atomic.Bool
}

func (f *flakyRenew) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	if f.blocked.Load() {
		return c, ledger.ErrUnavailable
	}
	return f.Backend.Renew(ctx, c, lease)
}

// TestLeaseLost: a worker cut off from the ledger loses its lease; the work is
// claimed again (attempt 2) with a higher token; when the first worker reconnects its
// renewal is refused, its handler's context is cancelled, and its result is
// dropped, so the second holder's is the one recorded.
func TestLeaseLost(t *testing.T) {
	l := &flakyRenew{Backend: newLedger(t, nil).Backend()}
	l.blocked.Store(true)
	outcomes := make(chan string, 4)
	p, err := intake.New(ledger.New(l), intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		if w.Attempt == 1 {
			<-ctx.Done() // stalls until its lease is known lost
			return "stale holder", nil
		}
		l.blocked.Store(false) // the first worker reconnects
		return "second holder", nil
	}), &intake.Options{Lease: intake.MinLease, Poll: 10 * time.Millisecond,
		OnOutcome: func(w intake.Work, outcome string, err error) { outcomes <- fmt.Sprint(w.Attempt, " ", outcome) }})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{<-outcomes: true, <-outcomes: true}
	if !got["2 processed"] || !got["1 lease_lost"] {
		t.Fatalf("outcomes %v, want attempt 2 processed and attempt 1 lease_lost", got)
	}
	rs, err := l.Get(context.Background(), "b", "k")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Status != ledger.Processed || rs[0].Result != "second holder" || rs[0].Attempts != 2 {
		t.Fatalf("record: %+v", rs[0])
	}
}

// TestShutdownReleases: at shutdown a handler that does not finish within the
// grace period is cancelled and its work released, uncounted, for the next run.
func TestShutdownReleases(t *testing.T) {
	l := newLedger(t, nil)
	started := make(chan struct{})
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	}), &intake.Options{Grace: 50 * time.Millisecond})
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
	p2, _ := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		close(done)
		return "", nil
	}), nil)
	start(t, p2)
	<-done
}

// flakySettle is a real ledger whose settling calls (CompleteBatch, Fail,
// Release) fail with a transient error while failing > 0, counting down, or
// with refuse (e.g. ErrLeaseLost) if set: fault injection for a ledger that
// deadlocks or drops connections under load (issue 15).
type flakySettle struct {
	ledger.Backend
	failing atomic.Int64
	refuse  error
	calls   atomic.Int64
}

var errTransient = errors.New("injected: deadlock detected (SQLSTATE 40P01)")

func (f *flakySettle) fault() error {
	f.calls.Add(1)
	if f.refuse != nil {
		return f.refuse
	}
	if f.failing.Add(-1) >= 0 {
		return errTransient
	}
	return nil
}

func (f *flakySettle) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Backend.CompleteBatch(ctx, cs, results)
}

func (f *flakySettle) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Backend.Fail(ctx, c, cause, retryable)
}

// TestSettleRetried: a handler's outcome the ledger fails to record for a
// transient reason is recorded by a later attempt, within the lease: the
// handler runs once, nothing is given up.
func TestSettleRetried(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"ok", "fails"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			l := &flakySettle{Backend: newLedger(t, &ledger.Options{RetryBase: time.Hour}).Backend()}
			l.failing.Store(5)
			var runs atomic.Int64
			reg := prometheus.NewRegistry()
			outcomes := make(chan string, 4)
			p, err := intake.New(ledger.New(l), intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
				runs.Add(1)
				if w.Event.Key == "fails" {
					return "", errors.New("try later")
				}
				return "done", nil
			}), &intake.Options{Poll: 10 * time.Millisecond, Registerer: reg,
				OnOutcome: func(w intake.Work, outcome string, err error) { outcomes <- outcome }})
			if err != nil {
				t.Fatal(err)
			}
			start(t, p)
			if _, err := p.Submit(context.Background(), "test", []event.Event{ev(key, 1)}); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"ok": intake.OutcomeProcessed, "fails": intake.OutcomeRetry}[key]
			if got := <-outcomes; got != want {
				t.Fatalf("outcome %s, want %s", got, want)
			}
			rs, err := l.Get(context.Background(), "b", key)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus := map[string]ledger.Status{"ok": ledger.Processed, "fails": ledger.Failed}[key]
			if rs[0].Status != wantStatus || runs.Load() != 1 || l.calls.Load() != 6 {
				t.Fatalf("record %s after %d handler runs and %d settle calls; want %s, 1 run, 6 calls (5 transient failures)",
					rs[0].Status, runs.Load(), l.calls.Load(), wantStatus)
			}
			if n := gathered(t, reg, "cairn_intake_settle_given_up_total"); n != 0 {
				t.Fatalf("%v settles given up", n)
			}
			if n := gathered(t, reg, "cairn_intake_settle_retries_total"); n != 5 {
				t.Fatalf("%v settle retries, want 5", n)
			}
		})
	}
}

// TestSettleGivenUp: a ledger that cannot record an outcome until the lease
// ran out: settling stops then, counted; the work is claimed again (attempt 2)
// and processed. A refusal (lease lost) is never retried.
func TestSettleGivenUp(t *testing.T) {
	t.Parallel()
	t.Run("transient", func(t *testing.T) {
		t.Parallel()
		l := &flakySettle{Backend: newLedger(t, nil).Backend()}
		l.failing.Store(1 << 40)
		reg := prometheus.NewRegistry()
		outcomes := make(chan string, 4)
		p, err := intake.New(ledger.New(l), intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) { return "done", nil }), &intake.Options{Lease: intake.MinLease, Poll: 10 * time.Millisecond, Registerer: reg,
			OnOutcome: func(w intake.Work, outcome string, err error) { outcomes <- fmt.Sprint(w.Attempt, " ", outcome) }})
		if err != nil {
			t.Fatal(err)
		}
		start(t, p)
		began := time.Now()
		if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
			t.Fatal(err)
		}
		if got := <-outcomes; got != "1 processed" {
			t.Fatalf("outcome %q", got)
		}
		if d := time.Since(began); d < intake.MinLease/2 {
			t.Fatalf("gave up after %v, before the lease (%v) ran out", d, intake.MinLease)
		}
		if n := gathered(t, reg, "cairn_intake_settle_given_up_total"); n != 1 {
			t.Fatalf("%v settles given up, want 1", n)
		}
		l.failing.Store(0) // the ledger recovers: the work runs again and is recorded
		if got := <-outcomes; got != "2 processed" {
			t.Fatalf("outcome %q, want attempt 2 processed", got)
		}
		waitFor(t, func() bool {
			rs, err := l.Get(context.Background(), "b", "k")
			return err == nil && rs[0].Status == ledger.Processed && rs[0].Attempts == 2
		})
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l := &flakySettle{Backend: newLedger(t, nil).Backend(), refuse: fmt.Errorf("fail: %w", ledger.ErrLeaseLost)}
		reg := prometheus.NewRegistry()
		outcomes := make(chan string, 4)
		p, err := intake.New(ledger.New(l), intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) { return "", errors.New("try later") }), &intake.Options{Poll: 10 * time.Millisecond, Registerer: reg,
			OnOutcome: func(w intake.Work, outcome string, err error) { outcomes <- outcome }})
		if err != nil {
			t.Fatal(err)
		}
		start(t, p)
		if _, err := p.Submit(context.Background(), "test", []event.Event{ev("k", 1)}); err != nil {
			t.Fatal(err)
		}
		if got := <-outcomes; got != intake.OutcomeLeaseLost {
			t.Fatalf("outcome %q, want lease_lost", got)
		}
		if n := l.calls.Load(); n != 1 {
			t.Fatalf("a refused settle was tried %d times, want 1", n)
		}
		if n := gathered(t, reg, "cairn_intake_settle_given_up_total") + gathered(t, reg, "cairn_intake_settle_retries_total"); n != 0 {
			t.Fatalf("a refusal counted as %v retries or give-ups", n)
		}
	})
}

// gathered sums a metric family's values in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestEveryVersionWarnsUnversioned: with every-version processing, events
// without a version id (an unversioned bucket) are warned about once, instead
// of coalescing per key without a word.
func TestEveryVersionWarnsUnversioned(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	lw := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(b) })
	p, err := intake.New(newLedger(t, &ledger.Options{EveryVersion: true}), intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), &intake.Options{Logger: slog.New(slog.NewTextHandler(lw, nil))})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	for i := range 3 {
		ev := event.Event{Bucket: "b", Key: "k", Kind: event.Created, Sequencer: fmt.Sprintf("%02X", i+1), ETag: "e"}
		if _, err := p.Submit(context.Background(), "test", []event.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "events carry no version id"); n != 1 {
		t.Fatalf("warned %d times, want once:\n%s", n, buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestOwnWorkNotLeftToPoll: a Submit whose record claims older work instead
// of its own (RecordAndClaim takes the earliest due first) must wake the
// dispatcher for what it left, not leave it to the next poll. The older work
// here comes from another writer of the ledger, which wakes nobody; the poll
// is an hour, so without the wake the submitted work never runs.
func TestOwnWorkNotLeftToPoll(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	l := newLedger(t, &ledger.Options{Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	var mu sync.Mutex
	ran := map[string]bool{}
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		mu.Lock()
		ran[w.Event.Key] = true
		mu.Unlock()
		return "ok", nil
	}), &intake.Options{Concurrency: 4, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	ctx := t.Context()
	// A first event, run: by then the dispatcher's Claims found nothing more
	// and it sleeps its poll.
	if _, err := p.Submit(ctx, "test", []event.Event{ev("warm-up", 1)}); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		done := ran["warm-up"]
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	var other, mine []event.Event
	for i := range 4 {
		other = append(other, ev(fmt.Sprintf("other-%d", i), 1))
		mine = append(mine, ev(fmt.Sprintf("mine-%d", i), 1))
	}
	if _, err := l.Record(ctx, "elsewhere", other); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(time.Second)) // the other writer's work is older
	if _, err := p.Submit(ctx, "test", mine); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a bound on "never", not a latency
	for {
		mu.Lock()
		n := 0
		for _, e := range mine {
			if ran[e.Key] {
				n++
			}
		}
		mu.Unlock()
		if n == len(mine) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the submitted %d records ran with free slots; the rest wait for a poll an hour away", n, len(mine))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeftWorkRunsWhileBusy: batches recorded while every slot is taken
// leave their work to the next batches' claims, and the dispatcher takes
// what is left once the record loop idles: with the poll an hour away, every
// record still runs.
func TestLeftWorkRunsWhileBusy(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	var ran sync.Map
	var n atomic.Int64
	p, err := intake.New(l, intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		time.Sleep(2 * time.Millisecond)
		if _, dup := ran.LoadOrStore(w.Event.Key, true); !dup {
			n.Add(1)
		}
		return "ok", nil
	}), &intake.Options{Concurrency: 2, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	const senders, each = 8, 25
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if _, err := p.Submit(t.Context(), "test", []event.Event{ev(fmt.Sprintf("k-%d-%d", s, i), 1)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second) // a bound on "never", not a latency
	for n.Load() < senders*each {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records ran; the rest wait for a poll an hour away", n.Load(), senders*each)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
