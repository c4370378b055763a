package treelock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A long-lived Manager that meets ever new sessions of other processes
// (each locks /x, is seen by b, then releases and closes) forgets each once
// it no longer matters: its watch shrinks back to nothing. Before, every
// session it had ever seen stayed in it until its own Close.
func TestWatchStaysBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		const ttl = time.Second
		b := treelock.New(s, &treelock.Options{TTL: ttl})
		defer b.Close()
		r := treelock.Request{Write: []string{"/x"}}
		const n = 50
		for range n {
			a := treelock.New(s, &treelock.Options{TTL: ttl})
			h, err := a.Acquire(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx, r); !errors.Is(err, treelock.ErrNotAcquired) {
				t.Fatalf("b against a live holder: %v", err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			a.Close()
			time.Sleep(ttl / 10)
		}
		if got := b.Watched(); got == 0 || got > n {
			t.Fatalf("b watches %d sessions after meeting %d: the test expects some", got, n)
		}
		time.Sleep(3 * ttl) // b's session renews meanwhile
		if got := b.Watched(); got != 0 {
			t.Fatalf("b still watches %d sessions 3 TTLs after the last of %d came and went", got, n)
		}
	})
}
