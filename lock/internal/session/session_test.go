package session_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/lock/internal/session"
)

func TestMain(m *testing.M) { testmain.Run(m) }

const ttl = 3 * time.Second

var errLost = errors.New("lost")

// step waits until the session's renewer waits on the fake clock, then moves
// the clock on by d. The renewer has finished its previous round when it
// waits again.
func step(t *testing.T, fc *clockwork.FakeClock, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fc.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("the renewer does not wait on the clock: %v", err)
	}
	fc.Advance(d)
}

func ended(s interface{ Done() <-chan struct{} }) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

func waitDone(t *testing.T, s interface{ Done() <-chan struct{} }) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed")
	}
}

// Renewed every TTL/3, a session stays valid for as long as renewals succeed.
func TestRenewedSessionLives(t *testing.T) {
	fc := clockwork.NewFakeClock()
	var renewals, after atomic.Int64
	s := session.Start(fc.Now(), session.Config{TTL: ttl, Clock: fc, Lost: errLost,
		Renew:      func(context.Context) error { renewals.Add(1); return nil },
		AfterRenew: func(context.Context) { after.Add(1) }})
	for range 30 { // ten TTLs
		step(t, fc, ttl/3)
		if !s.Valid() || ended(s) {
			t.Fatalf("after %d renewals: valid %v, ended %v", renewals.Load(), s.Valid(), ended(s))
		}
	}
	step(t, fc, 0) // the last round has finished
	if renewals.Load() != 30 || after.Load() != 30 {
		t.Fatalf("%d renewals, %d AfterRenew in ten TTLs, want 30 each", renewals.Load(), after.Load())
	}
	if err := s.Stop(); err != nil || s.Valid() {
		t.Fatalf("Stop of a live session: %v, valid after %v", err, s.Valid())
	}
	if ended(s) {
		t.Fatal("Done closed by Stop alone")
	}
	s.End(nil)
	if !ended(s) || s.Err() != nil {
		t.Fatalf("after End(nil): ended %v, err %v", ended(s), s.Err())
	}
}

// Renewals that fail leave the session to die at exactly its deadline: TTL
// after the start of the last confirmed renewal.
func TestUnrenewedSessionDiesAtDeadline(t *testing.T) {
	fc := clockwork.NewFakeClock()
	var n atomic.Int64
	expired := make(chan struct{})
	s := session.Start(fc.Now(), session.Config{TTL: ttl, Clock: fc, Lost: errLost,
		Renew: func(context.Context) error {
			if n.Add(1) > 1 {
				return errors.New("store unavailable")
			}
			return nil
		},
		OnExpire: func(context.Context) { close(expired) }})
	step(t, fc, ttl/3) // confirmed: deadline = TTL/3 + TTL; the next ones fail
	step(t, fc, ttl/3)
	step(t, fc, ttl/3)
	step(t, fc, ttl/3-time.Millisecond)
	if ended(s) || !s.Valid() {
		t.Fatalf("ended 1ms before its deadline (at %v of %v)", fc.Since(s.Deadline()), ttl)
	}
	step(t, fc, time.Millisecond)
	waitDone(t, s)
	<-expired
	if err := s.Err(); !errors.Is(err, errLost) || s.Valid() {
		t.Fatalf("after the deadline: err %v, valid %v", err, s.Valid())
	}
	if err := s.Stop(); !errors.Is(err, errLost) {
		t.Fatalf("Stop of a lost session: %v, want the loss", err)
	}
}

// A renewal confirmed only after the deadline extends nothing: it may have
// landed after an observer judged the record dead.
func TestLateConfirmedRenewalExtendsNothing(t *testing.T) {
	fc := clockwork.NewFakeClock()
	var n atomic.Int64
	s := session.Start(fc.Now(), session.Config{TTL: ttl, Clock: fc, Lost: errLost,
		Renew: func(context.Context) error {
			if n.Add(1) == 1 {
				fc.Advance(ttl) // the store answers after the deadline
			}
			return nil
		}})
	step(t, fc, ttl/3)
	waitDone(t, s)
	if !errors.Is(s.Err(), errLost) {
		t.Fatalf("err %v, want the loss", s.Err())
	}
	if n.Load() != 1 {
		t.Fatalf("%d renewals after the deadline", n.Load()-1)
	}
}

// A renewal that finds the record taken ends the session at once.
func TestRenewalFindsRecordTaken(t *testing.T) {
	fc := clockwork.NewFakeClock()
	s := session.Start(fc.Now(), session.Config{TTL: ttl, Clock: fc, Lost: errLost,
		Renew: func(context.Context) error { return fmt.Errorf("%w: taken over", errLost) }})
	step(t, fc, ttl/3)
	waitDone(t, s)
	if err := s.Err(); !errors.Is(err, errLost) || err.Error() != "lost: taken over" {
		t.Fatalf("err %v", err)
	}
}

// A Sub ends with its session, or before it on its own.
func TestSubs(t *testing.T) {
	fc := clockwork.NewFakeClock()
	s := session.Start(fc.Now(), session.Config{TTL: ttl, Clock: fc, Lost: errLost,
		Renew: func(context.Context) error { return nil }})
	a, b := s.Sub(), s.Sub()
	if prev := a.End(nil); prev != nil || !ended(a) || ended(b) || ended(s) {
		t.Fatalf("ending one sub: prev %v, a %v b %v session %v", prev, ended(a), ended(b), ended(s))
	}
	cause := errors.New("closed")
	s.End(cause)
	if !ended(b) || b.Err() != cause || a.Err() != nil {
		t.Fatalf("after the session ended: b ended %v err %v; a err %v", ended(b), b.Err(), a.Err())
	}
	if prev := b.End(nil); prev != cause || b.Err() != cause {
		t.Fatalf("ending a sub of an ended session: prev %v err %v", prev, b.Err())
	}
	if c := s.Sub(); !ended(c) || c.Err() != cause {
		t.Fatal("a sub of an ended session is live")
	}
}

// The observer's rule: dead once a record kept one revision for a whole TTL
// as watched here; a new revision starts the watch again.
func TestWatchRule(t *testing.T) {
	fc := clockwork.NewFakeClock()
	w := session.NewWatch(fc)
	if w.Dead("a", 1, ttl) {
		t.Fatal("dead at first sight")
	}
	fc.Advance(ttl - time.Millisecond)
	if w.Dead("a", 1, ttl) {
		t.Fatal("dead before a whole TTL")
	}
	fc.Advance(time.Millisecond)
	if !w.Dead("a", 1, ttl) {
		t.Fatal("alive after a whole TTL unchanged")
	}
	if w.Dead("a", 2, ttl) {
		t.Fatal("dead at a new revision")
	}
	fc.Advance(ttl)
	if !w.Dead("a", 2, ttl) {
		t.Fatal("alive after a whole TTL at the new revision")
	}
	w.Forget("a")
	if w.Watched("a") || w.Len() != 0 || w.Dead("a", 2, ttl) {
		t.Fatal("Forget kept the observation")
	}
}

// Records nobody asks about any more are forgotten after two of their TTLs:
// a process that sees ever new records keeps a bounded map.
func TestWatchForgetsOldRecords(t *testing.T) {
	fc := clockwork.NewFakeClock()
	w := session.NewWatch(fc)
	for i := range 1000 {
		w.Dead(fmt.Sprint("gone-", i), 1, ttl)
		fc.Advance(ttl / 100)
	}
	if n := w.Len(); n > 400 {
		t.Fatalf("%d observations kept for records asked about over 10 TTLs, want those of the last 2-3 TTLs", n)
	}
	for range 3 {
		fc.Advance(ttl)
		w.Dead("live", 1, ttl)
	}
	if n := w.Len(); n != 1 || !w.Watched("live") {
		t.Fatalf("%d observations after 3 TTLs of asking about one record only", n)
	}
	if !w.Dead("live", 1, ttl) {
		t.Fatal("a record asked about all along lost its observation")
	}
}

// Prune forgets at once what nobody asked about for two TTLs.
func TestWatchPrune(t *testing.T) {
	fc := clockwork.NewFakeClock()
	w := session.NewWatch(fc)
	w.Dead("a", 1, ttl)
	fc.Advance(2*ttl - time.Millisecond)
	w.Prune()
	if !w.Watched("a") {
		t.Fatal("forgotten before two TTLs")
	}
	fc.Advance(time.Millisecond)
	w.Prune()
	if w.Len() != 0 {
		t.Fatal("kept after two TTLs unasked")
	}
}
