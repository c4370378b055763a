package intake_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDaemonJobsAndPurge: a Daemon runs its jobs (a failing run is logged and
// the job goes on), purges finished records past Retention as it starts, and
// stops its jobs when ctx ends. The ledger's clock is two hours behind, so
// that its record is older than the shortest retention (ledger.MinPurgeAge).
func TestDaemonJobsAndPurge(t *testing.T) {
	t.Parallel()
	l := newLedger(t, &ledger.Options{Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	ctx := context.Background()
	if _, err := l.Record(ctx, "test", []event.Event{ev("old", 1)}); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 1, time.Minute)
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	if err := l.Complete(ctx, cs[0], "ok"); err != nil {
		t.Fatal(err)
	}
	p, err := intake.New(l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan int, 100)
	var n int
	job := intake.Job{Name: "tick", Every: time.Millisecond, Run: func(ctx context.Context) error {
		n++
		select {
		case runs <- n:
		default: // the test stopped reading
		}
		if n == 1 {
			return errors.New("first run fails")
		}
		return nil
	}}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	d := &intake.Daemon{Pipeline: p, Logger: log, Jobs: []intake.Job{job}, Retention: ledger.MinPurgeAge, PurgeEvery: time.Millisecond}
	go func() { done <- d.Run(rctx) }()
	for <-runs < 3 {
	}
	for !strings.Contains(logs.String(), "purged finished records") {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `msg="tick failed" err="first run fails"`) || !strings.Contains(out, `msg="purged finished records" records=1`) {
		t.Fatalf("log lacks the failed job or the purge:\n%s", out)
	}
	if recs, err := l.Lookup(ctx, "b", []string{"old"}); err != nil || len(recs) != 0 {
		t.Fatalf("the finished record is still there after the purge: %v %v", recs, err)
	}
}

// TestDaemonJobChecked: a Job without an interval, and a Retention under
// ledger.MinPurgeAge, are refused before anything starts.
func TestDaemonJobChecked(t *testing.T) {
	t.Parallel()
	p, err := intake.New(newLedger(t, nil), intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    *intake.Daemon
		want string
	}{
		{&intake.Daemon{Pipeline: p, Jobs: []intake.Job{{Name: "x", Run: func(context.Context) error { return nil }}}}, "positive Every"},
		{&intake.Daemon{Pipeline: p, Retention: time.Minute}, "MinPurgeAge"},
	} {
		if err := tc.d.Run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Run: %v, want a refusal naming %s", err, tc.want)
		}
	}
}
