package demo_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/demo"
	"github.com/cairn-s3/cairn/internal/testmain"
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
			store := objstore.New(faulty.New(mem.NewBackend(""), c.opts), nil)
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
