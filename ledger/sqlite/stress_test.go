package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// The intake log's invariants hold under every mix of calls the writer can
// group: workers make random Records, RecordAndClaims, Claims, CompleteBatches
// (some lingering), Renews, Fails and Releases, with contexts that may end at
// any moment, ~1% of their strings not UTF-8 (the direct-write fallback),
// leases that run out mid-run; with EveryVersion or not, with log bounds so
// small that folds run inside groups, and with a second process writing the
// same file. Between transactions, CheckIntakeLog compares the cache with the
// log and the table; at the end no call is left queued.
func TestIntakeLogStress(t *testing.T) {
	tiny := sqlledger.LogLimits{Rows: 8, Bytes: 3000}
	for _, tc := range []struct {
		name         string
		everyVersion bool
		limits       sqlledger.LogLimits
		other        bool
		workers      int
		pause        time.Duration
	}{
		{"default", false, sqlledger.LogLimits{}, false, 12, 0},
		{"tiny-log", false, tiny, false, 12, 0},
		{"tiny-log-every-version", true, tiny, false, 12, 0},
		{"two-processes", false, sqlledger.LogLimits{Rows: 16, Bytes: 6000}, true, 12, 0},
		{"sparse", true, tiny, true, 4, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stressIntakeLog(t, tc.everyVersion, tc.limits, tc.other, tc.workers, tc.pause, 2*time.Second)
		})
	}
}

func stressIntakeLog(t *testing.T, everyVersion bool, limits sqlledger.LogLimits, other bool, workers int, pause, run time.Duration) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	opts := &ledger.Options{EveryVersion: everyVersion}
	l, err := sqlite.OpenBackendWithLogLimits(ctx, path, opts, limits)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var l2 *sqlledger.Backend // the other process: a second backend on the file
	if other {
		if l2, err = sqlite.OpenBackendWithLogLimits(ctx, path, opts, limits); err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
	}
	var seq atomic.Int64
	var mu sync.Mutex
	var held []ledger.Claim
	take := func(r *rand.Rand, n int) []ledger.Claim {
		mu.Lock()
		defer mu.Unlock()
		var out []ledger.Claim
		for len(held) > 0 && len(out) < n {
			i := r.IntN(len(held))
			out = append(out, held[i])
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
		}
		return out
	}
	give := func(cs []ledger.Claim) { mu.Lock(); held = append(held, cs...); mu.Unlock() }
	callCtx := func(r *rand.Rand) (context.Context, context.CancelFunc) {
		c := context.Background()
		if r.IntN(3) == 0 {
			c = ledger.WithLinger(c, time.Duration(r.IntN(5000))*time.Microsecond)
		}
		if r.IntN(5) == 0 {
			return context.WithTimeout(c, time.Duration(r.IntN(3000))*time.Microsecond)
		}
		return context.WithCancel(c)
	}
	events := func(r *rand.Rand, n int) []event.Event {
		out := make([]event.Event, n)
		for i := range out {
			etag := "e" + strconv.Itoa(r.IntN(5))
			if r.IntN(100) == 0 {
				etag = "bad\xff"
			}
			out[i] = event.Event{Bucket: "b", Key: "k" + strconv.Itoa(r.IntN(40)), Sequencer: fmt.Sprintf("%016x", seq.Add(1)),
				Kind: event.Created, Name: "ObjectCreated:Put", ETag: etag, VersionID: "v" + strconv.Itoa(r.IntN(3))}
		}
		return out
	}
	lease := func(r *rand.Rand) time.Duration {
		if r.IntN(4) == 0 {
			return time.Duration(1+r.IntN(20)) * time.Millisecond
		}
		return time.Hour
	}
	// expected: what a call may answer here besides nil.
	expected := func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, ledger.ErrLeaseLost) ||
			errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrNotFound)
	}
	errc := make(chan error, 1)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	stop := time.Now().Add(run)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) {
				if pause > 0 {
					time.Sleep(time.Duration(r.Int64N(int64(pause))))
				}
				c, cancel := callCtx(r)
				b := l
				if l2 != nil && r.IntN(20) == 0 {
					b = l2
				}
				var err error
				switch r.IntN(8) {
				case 0:
					_, _, err = b.RecordAndClaim(c, "s", events(r, 1+r.IntN(8)), 0, 0)
				case 1:
					var cs []ledger.Claim
					_, cs, err = b.RecordAndClaim(c, "s", events(r, 1+r.IntN(8)), r.IntN(4), lease(r))
					give(cs)
				case 2:
					var cs []ledger.Claim
					cs, err = b.Claim(c, 1+r.IntN(5), lease(r))
					give(cs)
				case 3, 4:
					cs := take(r, 1+r.IntN(5))
					if len(cs) == 0 {
						break
					}
					results := make([]string, len(cs))
					for i := range results {
						results[i] = "ok"
						if r.IntN(50) == 0 {
							results[i] = "\xc3bad"
						}
					}
					_, err = b.CompleteBatch(c, cs, results)
				case 5:
					for _, cl := range take(r, 1) {
						var nc ledger.Claim
						if nc, err = b.Renew(c, cl, lease(r)); err == nil {
							give([]ledger.Claim{nc})
						}
					}
				case 6:
					for _, cl := range take(r, 1) {
						err = b.Fail(c, cl, "boom", r.IntN(2) == 0)
					}
				case 7:
					for _, cl := range take(r, 1) {
						err = b.Release(c, cl)
					}
				}
				cancel()
				if err != nil && !expected(err) {
					report(fmt.Errorf("unexpected: %w", err))
				}
			}
		})
	}
	checked := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := l.CheckIntakeLog(ctx); err != nil {
				report(err)
			}
		}
	}()
	wg.Wait()
	close(done)
	<-checked
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	// A caller that gave up at its deadline returned while the group that
	// held its call runs on (the lead then passes on, to no one): wait for
	// that to end, then nothing may be queued or leading.
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		n, leading := l.LogQueue()
		if n == 0 && !leading {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d calls queued, leading %v, 30s after every call returned", n, leading)
		}
	}
	if err := l.CheckIntakeLog(ctx); err != nil {
		t.Fatal(err)
	}
}
