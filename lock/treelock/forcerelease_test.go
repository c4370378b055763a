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

// TestForceRelease: a session released on purpose frees its locks at once
// (no TTL of waiting), says whose it was, gives the next holder a higher
// token, and its process loses its locks at its next renewal.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		const ttl = 300 * time.Millisecond
		a := treelock.New(s, &treelock.Options{TTL: ttl})
		defer a.Close()
		ha, err := a.Acquire(ctx, treelock.Request{Write: []string{"/jobs/x"}})
		if err != nil {
			t.Fatal(err)
		}
		ops := treelock.New(s, &treelock.Options{TTL: ttl})
		defer ops.Close()
		sessions, err := ops.Sessions(ctx)
		if err != nil || len(sessions) != 1 || sessions[0].Holder == "" || sessions[0].Since == "" || sessions[0].LastWrite.IsZero() {
			t.Fatalf("sessions: %+v %v", sessions, err)
		}
		b := treelock.New(s, &treelock.Options{TTL: ttl})
		defer b.Close()
		if _, err := b.TryAcquire(ctx, treelock.Request{Write: []string{"/jobs/x"}}); !errors.Is(err, treelock.ErrNotAcquired) {
			t.Fatalf("before: %v, want ErrNotAcquired", err)
		}
		released, err := ops.ForceRelease(ctx, sessions[0].ID)
		if err != nil || released.Holder != sessions[0].Holder {
			t.Fatalf("force release: %+v %v", released, err)
		}
		hb, err := b.TryAcquire(ctx, treelock.Request{Write: []string{"/jobs/x"}})
		if err != nil {
			t.Fatalf("right after the force release: %v", err)
		}
		if hb.Token("/jobs/x") <= ha.Token("/jobs/x") {
			t.Fatalf("the next holder's token %d is not above the released one's %d", hb.Token("/jobs/x"), ha.Token("/jobs/x"))
		}
		select {
		case <-ha.Done():
		case <-time.After(2 * ttl):
			t.Fatal("the released session still holds its locks")
		}
		if !errors.Is(ha.Err(), treelock.ErrSessionLost) {
			t.Fatalf("the released session's error: %v", ha.Err())
		}
		if _, err := ops.ForceRelease(ctx, sessions[0].ID); !errors.Is(err, treelock.ErrNoSession) {
			t.Fatalf("again: %v, want ErrNoSession", err)
		}
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
