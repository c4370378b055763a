// Package sourcetest is the conformance suite every pull source of cairn's
// intake passes (intake/natssrc on an in-process NATS server, intake/kafkasrc
// on an in-process kfake cluster, intake/sqssrc on its protocol fake): call
// Run from the source's tests with a Harness over a real or in-process broker.
//
// The rules it checks are the package intake's promise for pull sources:
//
//   - A message is acknowledged only after a terminal ledger decision: while
//     Submit runs it is still outstanding; a Submit that fails leaves it
//     unacknowledged and it is delivered again; once Submit succeeded it is
//     acknowledged.
//   - A crash (the source's Run stops without acknowledging, here: its context
//     ends while the ledger's answer is lost) loses nothing: a new Run of a new
//     source on the same subscription receives the messages again, and the
//     ledger records each event once (duplicates are counted, not recorded).
//   - A poison message (not an event) never blocks the messages behind it and
//     is not delivered for ever: the source gives up on it (NATS terminates it,
//     Kafka commits past it, SQS deletes it or leaves it to the queue's
//     dead-letter redrive; a Harness uses a policy that gives up).
//
// The suite records into a real SQLite ledger. It waits for outcomes, never
// for a fixed time; a broken rule fails the test or times it out (60 s).
package sourcetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A Queue is one test case's broker-side subscription: a stream and durable
// consumer, a topic and consumer group, a queue.
type Queue interface {
	// Publish adds a message with body to the queue.
	Publish(t *testing.T, body []byte)
	// Source returns a new source consuming the queue under the same durable
	// name (consumer, group): what one source left unacknowledged, the next
	// receives. Its redelivery delays should be short (a second or two).
	Source(t *testing.T) intake.Source
	// Outstanding counts the published messages the source has neither
	// acknowledged nor given up on (terminated, committed past, deleted). It
	// is called from inside Submit too.
	Outstanding(ctx context.Context) (int, error)
}

// Harness opens a new, empty Queue for each case.
type Harness struct {
	Open func(t *testing.T) Queue
}

// Run runs the suite's cases as subtests.
func Run(t *testing.T, h Harness) {
	t.Run("AckAfterDecision", func(t *testing.T) { t.Parallel(); ackAfterDecision(t, h.Open(t)) })
	t.Run("CrashRedelivers", func(t *testing.T) { t.Parallel(); crashRedelivers(t, h.Open(t)) })
	t.Run("Poison", func(t *testing.T) { t.Parallel(); poison(t, h.Open(t)) })
}

// Body is an S3 notification of key's creation at sequencer seq.
func Body(key string, seq int) []byte {
	return event.S3Body(event.Event{Bucket: "bkt", Key: key, Sequencer: fmt.Sprintf("%08X", seq), Kind: event.Created, ETag: "e"})
}

// sink records into a ledger after calling before, if set: before may fail
// the submission (nothing recorded) or block.
type sink struct {
	l      *ledger.Ledger
	mu     sync.Mutex
	before func(evs []event.Event) error
	after  func(evs []event.Event) error
}

func (s *sink) set(before, after func([]event.Event) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before, s.after = before, after
}

func (s *sink) Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	s.mu.Lock()
	before, after := s.before, s.after
	s.mu.Unlock()
	if before != nil {
		if err := before(evs); err != nil {
			return nil, err
		}
	}
	ds, err := s.l.Record(ctx, source, evs)
	if err == nil && after != nil {
		err = after(evs)
	}
	return ds, err
}

// Refused counts nothing: the suite's harnesses use poison policies that
// keep a poison message as a refused message (intake.RefusedEvent).
func (s *sink) Refused(string, int) {}

func newSink(t *testing.T) *sink {
	t.Helper()
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &sink{l: l}
}

// start runs src until the returned stop is called (or the test ends).
func start(t *testing.T, src intake.Source, s intake.Sink) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, s) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", src.Name(), err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 60s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// records returns the ledger's records by key.
func records(t *testing.T, l *ledger.Ledger) map[string]ledger.Record {
	t.Helper()
	page, err := l.List(context.Background(), ledger.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]ledger.Record{}
	for _, r := range page {
		m[r.Key] = r.Record
	}
	return m
}

func settled(t *testing.T, q Queue) bool {
	t.Helper()
	n, err := q.Outstanding(context.Background())
	if err != nil {
		t.Logf("outstanding: %v", err)
		return false
	}
	return n == 0
}

// ackAfterDecision: outstanding during Submit, not acknowledged after a
// failed Submit (delivered again), acknowledged after a successful one.
func ackAfterDecision(t *testing.T, q Queue) {
	s := newSink(t)
	q.Publish(t, Body("k", 1))
	var mu sync.Mutex
	calls := 0
	check := func(evs []event.Event) error {
		n, err := q.Outstanding(context.Background())
		mu.Lock()
		defer mu.Unlock()
		calls++
		if err == nil && n == 0 {
			t.Errorf("Submit call %d: the message is already acknowledged while the ledger has not decided", calls)
		}
		if calls == 1 {
			return fmt.Errorf("sourcetest: the ledger fails this submission: %w", ledger.ErrUnavailable)
		}
		return nil
	}
	s.set(check, nil)
	start(t, q.Source(t), s)
	waitFor(t, "the event recorded after a failed submission", func() bool { return len(records(t, s.l)) == 1 })
	waitFor(t, "the message acknowledged after its decision", func() bool { return settled(t, q) })
	mu.Lock()
	defer mu.Unlock()
	if calls < 2 {
		t.Fatalf("Submit called %d times; a failed submission must be delivered again", calls)
	}
}

// crashRedelivers: the ledger records a batch but its answer is lost while
// the source is being stopped; a new source receives the messages again and
// the ledger records each event once.
func crashRedelivers(t *testing.T, q Queue) {
	s := newSink(t)
	keys := []string{"a", "b", "c"}
	for i, k := range keys {
		q.Publish(t, Body(k, i+1))
	}
	recorded := make(chan []string, 1)
	release := make(chan struct{})
	var once sync.Once
	s.set(nil, func(evs []event.Event) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return fmt.Errorf("sourcetest: crashed: %w", ledger.ErrUnavailable)
		}
		var ks []string
		for _, e := range evs {
			ks = append(ks, e.Key)
		}
		recorded <- ks
		<-release // the crash: Run's context ends while this answer is pending
		return fmt.Errorf("sourcetest: crashed before the answer: %w", ledger.ErrUnavailable)
	})
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	src := q.Source(t)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, s) }()
	first := <-recorded
	crash()
	close(release)
	if err := <-done; err != nil {
		t.Errorf("%s: Run: %v", src.Name(), err)
	}
	if n, err := q.Outstanding(context.Background()); err == nil && n == 0 {
		t.Fatalf("every message was acknowledged though no submission succeeded")
	}
	s.set(nil, nil)
	start(t, q.Source(t), s)
	waitFor(t, "all messages acknowledged by the new source", func() bool { return settled(t, q) })
	recs := records(t, s.l)
	if len(recs) != len(keys) {
		t.Fatalf("%d records, want %d (each event once)", len(recs), len(keys))
	}
	for _, k := range first {
		if recs[k].Seen < 2 {
			t.Errorf("key %q recorded before the crash was seen %d times, want it delivered again", k, recs[k].Seen)
		}
	}
}

// poison: messages that are not events do not block the one behind them, are
// kept as refused messages (intake.RefusedEvent: visible and replayable) and
// are given up on.
func poison(t *testing.T, q Queue) {
	s := newSink(t)
	q.Publish(t, []byte(`not json at all`))
	q.Publish(t, []byte(`{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"bkt"},"object":{"key":"bad\u0000key","sequencer":"01"}}}]}`))
	q.Publish(t, Body("after", 1))
	start(t, q.Source(t), s)
	waitFor(t, "the message behind the poison ones recorded", func() bool { _, ok := records(t, s.l)["after"]; return ok })
	waitFor(t, "the poison messages given up on", func() bool { return settled(t, q) })
	recs := records(t, s.l)
	kept := 0
	for _, r := range recs {
		if r.Bucket == intake.RefusedBucket {
			kept++
		}
	}
	if len(recs)-kept != 1 || kept != 2 {
		t.Fatalf("%d records, %d of them refused messages; want the good one, and each poison message kept as a refused message (intake.RefusedEvent)", len(recs), kept)
	}
}
