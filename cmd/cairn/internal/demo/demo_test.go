package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/demo"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// TestRunStoreFails: the demo ends with an error naming what failed whenever
// the store fails, instead of hanging (issue 19: the writers returned on their
// first error while the producer blocked handing them keys, for ever). The
// context's deadline is only the bound past which the demo counts as hung.
func TestRunStoreFails(t *testing.T) {
	t.Parallel()
	// after fails every call of ops once n calls of them have succeeded.
	after := func(n int64, ops ...faulty.Op) *faulty.Options {
		var calls atomic.Int64
		return &faulty.Options{Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
			for _, o := range ops {
				if o == op && calls.Add(1) > n {
					return faulty.Fail, 0
				}
			}
			return faulty.None, 0
		}}
	}
	for _, c := range []struct {
		name string
		opts *faulty.Options
		want string // in the error
	}{
		{"every write", &faulty.Options{FailRate: 1, Ops: []faulty.Op{faulty.OpPut, faulty.OpDelete}}, "writing"},
		{"writes after 50", after(50, faulty.OpPut, faulty.OpDelete), "writing"},
		{"every list (the audit)", after(0, faulty.OpList), "audit"},
		{"heads after 5 (the final check)", after(5, faulty.OpHead), "bucket"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			led, err := sqlite.Open(t.Context(), filepath.Join(dir, "ledger.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer led.Close()
			store := objstore.New(faulty.New(mem.OpenBackend(""), c.opts), nil)
			defer store.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			type result struct {
				rep demo.Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := demo.Run(ctx, demo.Options{Store: store, Ledger: led, Dir: dir, Writes: 400, Keys: 80, Seed: 3})
				done <- result{rep, err}
			}()
			select {
			case <-ctx.Done():
				t.Fatalf("the demo did not end within 2 minutes of a failing store (%v)", context.Cause(ctx))
			case r := <-done:
				if r.err == nil {
					t.Fatalf("the demo succeeded on a failing store: %+v", r.rep)
				}
				if errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, faulty.ErrInjected) {
					t.Fatalf("the error should be the store's failure, not a timeout: %v", r.err)
				}
				if !strings.Contains(r.err.Error(), c.want) {
					t.Fatalf("the error should say it was %s that failed: %v", c.want, r.err)
				}
				t.Logf("%v", r.err)
			}
		})
	}
}

// TestCrashEffectsExactlyOnce: the daemon is stopped while a handler is stuck
// before its writes, a new one takes the work over with a higher fencing
// token, and the stuck handler's write lands after its successor's. The
// fenced sink refuses it: read back, every key's effect is the bucket's final
// state, written once. (With a plain put instead of fence.PutBytes in the
// demo's sink, the late write lands and this test fails.)
func TestCrashEffectsExactlyOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	led, err := sqlite.Open(t.Context(), filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	store := objstore.New(mem.OpenBackend(""), nil)
	defer store.Close()
	sink := objstore.New(mem.OpenBackend(""), nil)
	defer sink.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const keys = 40
	rep, err := demo.Run(ctx, demo.Options{Store: store, Ledger: led, Dir: dir, Sink: sink, Crash: true, Writes: 400, Keys: keys, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Effects
	if !rep.InvariantOK || x.Double != 0 || x.Wrong != 0 || x.StaleRefused < 1 || x.ExactlyOnce < 1 {
		t.Fatalf("effects %+v (invariants hold: %v, broken: %q): want every effect once, none wrong, the late write refused", x, rep.InvariantOK, rep.Broken())
	}
	// The successor took the stuck work over when its lease ran out: a
	// second attempt, which the report counts.
	if rep.Cairn.Retried < 1 {
		t.Fatalf("retried %d: the takeover of the stuck work was not counted", rep.Cairn.Retried)
	}
	// Read the sink back here too, against the bucket: each key's effect
	// is its final state, written once, under the highest token.
	once := 0
	for info, err := range store.List(ctx, "", nil) {
		if err != nil {
			t.Fatal(err)
		}
		data, meta, err := fence.Get(ctx, sink, info.Key)
		if err != nil {
			t.Fatalf("no effect for %q: %v", info.Key, err)
		}
		var e struct {
			State  string
			Token  int64
			Writes int
		}
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatal(err)
		}
		if e.State != info.ETag || e.Writes != 1 || e.Token != meta.Token {
			t.Errorf("effect of %q: %+v (fence token %d), want state %s written once under the highest token", info.Key, e, meta.Token, info.ETag)
		}
		once++
	}
	if once == 0 || once > x.ExactlyOnce {
		t.Errorf("%d objects in the bucket with their effect, the report says %d written exactly once", once, x.ExactlyOnce)
	}
}
