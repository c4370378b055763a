package ledgertest

// Claiming: leases and fencing tokens, and goroutines racing on the same keys.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

func testLease(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now})
	must(l.Record(ctx, "s", []event.Event{ev("k", "01")}))(t)
	a := must(l.Claim(ctx, 1, 10*time.Second))(t)[0]
	clk.Add(5 * time.Second)
	if _, err := l.Renew(ctx, a, 10*time.Second); err != nil {
		t.Fatalf("renew within the lease: %v", err)
	}
	clk.Add(11 * time.Second)
	if err := l.Complete(ctx, a, ""); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("complete after the lease expired: %v, want ErrLeaseLost", err)
	}
	b := must(l.Claim(ctx, 1, 10*time.Second))(t)
	if len(b) != 1 || b[0].Token != a.Token+1 || b[0].Attempts != 2 {
		t.Fatalf("takeover after expiry: %+v (old token %d)", b, a.Token)
	}
	for name, f := range map[string]func() error{
		"complete": func() error { return l.Complete(ctx, a, "") },
		"fail":     func() error { return l.Fail(ctx, a, "x", true) },
		"renew":    func() error { _, err := l.Renew(ctx, a, time.Minute); return err },
	} {
		if err := f(); !errors.Is(err, ledger.ErrSuperseded) {
			t.Errorf("%s by the superseded holder: %v, want ErrSuperseded", name, err)
		}
	}
	if err := l.Complete(ctx, b[0], "done"); err != nil {
		t.Fatal(err)
	}
}

// testNoLostUpdates has goroutines record, claim and complete events of a
// few keys at once: every delivery must be counted on its key's record (a
// write decided on a stale read of the row would lose some), the stale ones
// too, and the newest sequencer must win.
func testNoLostUpdates(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	const keys, goroutines, rounds = 3, 8, 25
	var mu sync.Mutex
	seen, stale, newest := map[string]int{}, map[string]int{}, map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errs <- func() error {
				var prev event.Event
				for r := range rounds {
					e := ev(fmt.Sprintf("race/%d", (g+r)%keys), fmt.Sprintf("%04X%02X", r, g))
					evs := []event.Event{e}
					if r%5 == 4 {
						evs = append(evs, prev) // a duplicate delivery
					}
					prev = e
					var ds []ledger.Decision
					var cs []ledger.Claim
					var err error
					if r%2 == 1 {
						ds, cs, err = l.RecordAndClaim(ctx, "race", evs, 1, time.Minute)
					} else {
						ds, err = l.Record(ctx, "race", evs)
					}
					if err != nil {
						return err
					}
					if r%3 == 0 {
						more, err := l.Claim(ctx, 2, time.Minute)
						if err != nil {
							return err
						}
						cs = append(cs, more...)
					}
					for _, c := range cs {
						if err := l.Complete(ctx, c, ""); err != nil && !errors.Is(err, ledger.ErrSuperseded) && !errors.Is(err, ledger.ErrLeaseLost) {
							return err
						}
					}
					mu.Lock()
					for i, d := range ds {
						seen[evs[i].Key]++
						if d.Outcome == ledger.Stale {
							stale[evs[i].Key]++
						}
						if event.CompareSequencer(evs[i].Sequencer, newest[evs[i].Key]) > 0 {
							newest[evs[i].Key] = evs[i].Sequencer
						}
					}
					mu.Unlock()
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for k, n := range seen {
		r := must(l.Get(ctx, "b", k))(t)[0]
		if r.Seen != n || r.Stale != stale[k] || r.Seq != newest[k] {
			t.Errorf("%s: seen %d, stale %d, sequencer %s; want %d, %d, %s (an update was lost)", k, r.Seen, r.Stale, r.Seq, n, stale[k], newest[k])
		}
	}
}

// testNoDeadlocks has 8 workers record batches (Record and RecordAndClaim),
// claim, and settle (CompleteBatch, Complete, Fail) over the same keys at once
// for a few seconds: the multi-row statements of one worker lock rows another
// is about to lock, so a backend that locks them in different orders deadlocks
// (PostgreSQL 40P01). No call may fail (a transient conflict is the backend's
// to retry), no settle may be refused (every claim holds a long lease), and
// at the end every key is processed at its newest sequencer.
func testNoDeadlocks(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, &ledger.Options{RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond, MaxAttempts: 1 << 20})
	const keys, workers, batch = 48, 8, 24
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	var mu sync.Mutex
	newest := map[string]string{}
	var calls, settled, failed int
	settle := func(rng *rand.Rand, cs []ledger.Claim) error {
		var batchCs []ledger.Claim
		for _, c := range cs {
			switch rng.IntN(8) {
			case 0:
				if err := l.Fail(ctx, c, "injected", true); err != nil {
					return fmt.Errorf("fail %s token %d: %w", c.Key, c.Token, err)
				}
				mu.Lock()
				failed++
				mu.Unlock()
			case 1:
				if err := l.Complete(ctx, c, "one"); err != nil {
					return fmt.Errorf("complete %s token %d: %w", c.Key, c.Token, err)
				}
			default:
				batchCs = append(batchCs, c)
			}
		}
		// Settle in an order of the worker's own, as a pipeline does.
		rng.Shuffle(len(batchCs), func(i, j int) { batchCs[i], batchCs[j] = batchCs[j], batchCs[i] })
		results := make([]string, len(batchCs))
		errs, err := l.CompleteBatch(ctx, batchCs, results)
		if err != nil {
			return fmt.Errorf("CompleteBatch of %d: %w", len(batchCs), err)
		}
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("CompleteBatch refused %s token %d: %w", batchCs[i].Key, batchCs[i].Token, err)
			}
		}
		mu.Lock()
		settled += len(cs)
		mu.Unlock()
		return nil
	}
	stop := time.Now().Add(duration)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			errs <- func() error {
				rng := rand.New(rand.NewPCG(uint64(g), 42))
				for r := 0; time.Now().Before(stop); r++ {
					evs := make([]event.Event, batch)
					for i := range evs {
						evs[i] = ev(fmt.Sprintf("dl/%02d", rng.IntN(keys)), fmt.Sprintf("%06X%02X%02X", r, g, i))
					}
					var cs []ledger.Claim
					var err error
					if r%2 == 0 {
						_, cs, err = l.RecordAndClaim(ctx, "deadlock", evs, batch/2, time.Hour)
					} else {
						_, err = l.Record(ctx, "deadlock", evs)
					}
					if err != nil {
						return fmt.Errorf("round %d: Record: %w", r, err)
					}
					mu.Lock()
					for _, e := range evs {
						if event.CompareSequencer(e.Sequencer, newest[e.Key]) > 0 {
							newest[e.Key] = e.Sequencer
						}
					}
					calls++
					mu.Unlock()
					more, err := l.Claim(ctx, batch, time.Hour)
					if err != nil {
						return fmt.Errorf("round %d: Claim: %w", r, err)
					}
					if err := settle(rng, append(cs, more...)); err != nil {
						return fmt.Errorf("round %d: %w", r, err)
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Drain what is left, then every key must be processed at its newest event.
	rng := rand.New(rand.NewPCG(99, 42))
	for deadline := time.Now().Add(time.Minute); ; {
		cs := must(l.Claim(ctx, 64, time.Hour))(t)
		if len(cs) == 0 {
			c := must(l.Counts(ctx))(t)
			if c[ledger.Pending]+c[ledger.Failed]+c[ledger.Claimed] == 0 {
				break
			}
		}
		if err := settle(rng, cs); err != nil {
			t.Fatalf("draining: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("work left after a minute of draining: %v", must(l.Counts(ctx))(t))
		}
		time.Sleep(2 * time.Millisecond)
	}
	c := must(l.Counts(ctx))(t)
	if c[ledger.Processed] != len(newest) || c[ledger.Dead] != 0 {
		t.Fatalf("counts %v, want %d processed and nothing else", c, len(newest))
	}
	for k, seq := range newest {
		if r := must(l.Get(ctx, "b", k))(t)[0]; r.Status != ledger.Processed || r.Seq != seq {
			t.Errorf("%s: %s at %s, want processed at %s", k, r.Status, r.Seq, seq)
		}
	}
	t.Logf("%d record calls, %d claims settled (%d failed on purpose) by %d workers in %v", calls, settled, failed, workers, duration)
}

func testStorm(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, _ := h.New(t, nil)
	const keys, goroutines = 24, 16
	var mu sync.Mutex
	log := runLog{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errs <- work(ctx, l, storm(keys, uint64(g+1)), 10, func(key, seq string, token int64) {
				mu.Lock()
				log.add(key, seq, token)
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkStorm(t, ctx, l, keys, log.inClaimOrder())
}

// storm is the same duplicate storm each deliverer sends in its own order:
// keys × 3 overwrites × 3 copies.
func storm(keys int, seed uint64) []event.Event {
	var evs []event.Event
	for k := range keys {
		for _, seq := range []string{"01", "02", "03"} {
			for range 3 {
				evs = append(evs, ev(fmt.Sprintf("storm/%03d", k), seq))
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	return evs
}

// work delivers evs in batches while claiming and completing, logging what ran.
func work(ctx context.Context, l *ledger.Ledger, evs []event.Event, batch int, log func(key, seq string, token int64)) error {
	for start := 0; start < len(evs); start += batch {
		if _, err := l.Record(ctx, "storm", evs[start:min(start+batch, len(evs))]); err != nil {
			return err
		}
		cs, err := l.Claim(ctx, 8, time.Minute)
		if err != nil {
			return err
		}
		for _, c := range cs {
			log(c.Key, c.Seq, c.Token)
			if err := l.Complete(ctx, c, ""); err != nil {
				return err
			}
		}
	}
	for {
		cs, err := l.Claim(ctx, 8, time.Minute)
		if err != nil || len(cs) == 0 {
			return err
		}
		for _, c := range cs {
			log(c.Key, c.Seq, c.Token)
			if err := l.Complete(ctx, c, ""); err != nil {
				return err
			}
		}
	}
}

func checkStorm(t *testing.T, ctx context.Context, l *ledger.Ledger, keys int, log map[string][]string) {
	t.Helper()
	checkLog(t, log, "03")
	if len(log) != keys {
		t.Fatalf("%d keys processed, want %d", len(log), keys)
	}
	for k := range keys {
		r := must(l.Get(ctx, "b", fmt.Sprintf("storm/%03d", k)))(t)[0]
		if r.Status != ledger.Processed || r.Seq != "03" {
			t.Fatalf("storm/%03d: %+v", k, r)
		}
	}
}

// runLog is which sequencer of each key ran under which token, as reported
// by workers that log after claiming: the order reports arrive in (across
// goroutines or processes) is not the order of the claims, but each claim of
// a key has a higher token than the one before.
type runLog map[string][]tokenSeq

type tokenSeq struct {
	token int64
	seq   string
}

func (r runLog) add(key, seq string, token int64) { r[key] = append(r[key], tokenSeq{token, seq}) }

// inClaimOrder is the sequencers of each key in the order they were claimed.
func (r runLog) inClaimOrder() map[string][]string {
	out := map[string][]string{}
	for key, runs := range r {
		slices.SortFunc(runs, func(a, b tokenSeq) int { return cmp.Compare(a.token, b.token) })
		for _, x := range runs {
			out[key] = append(out[key], x.seq)
		}
	}
	return out
}
