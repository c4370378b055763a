package sqssrc_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/sqssrc"
	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// sink records into a real SQLite ledger, optionally failing or stalling.
type sink struct {
	l     ledger.Ledger
	fail  atomic.Bool
	stall time.Duration
	calls atomic.Int64
}

func (s *sink) Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return nil, ledger.ErrUnavailable
	}
	time.Sleep(s.stall)
	return s.l.Record(ctx, source, evs)
}

func setup(t *testing.T, vis time.Duration) (*fakeSQS, *sink, *sqssrc.Source) {
	t.Helper()
	f := newFakeSQS(t)
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.srv.URL), Credentials: aws.AnonymousCredentials{}})
	src, err := sqssrc.New(context.Background(), sqssrc.Options{QueueURL: f.queueURL(), Client: c, Visibility: vis, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f, &sink{l: l}, src
}

func run(t *testing.T, src *sqssrc.Source, s *sink) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, s) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func body(key string, seq int) string {
	return string(event.S3Body(event.Event{Bucket: "b", Key: key, Sequencer: fmt.Sprintf("%08X", seq), Kind: event.Created, ETag: "e"}))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func counts(t *testing.T, s *sink) (records, seen int) {
	t.Helper()
	page, err := s.l.List(context.Background(), ledger.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page {
		seen += r.Seen
	}
	return len(page), seen
}

// TestDeliversAndDeletes: messages (with a duplicate and a malformed one) are
// recorded, then deleted; the malformed one stays for the redrive policy.
func TestDeliversAndDeletes(t *testing.T) {
	f, s, src := setup(t, 30*time.Second)
	for i := range 25 {
		f.send(body(fmt.Sprintf("k%02d ü +", i), 1))
	}
	f.send(body("k00 ü +", 1)) // duplicate
	f.send(`{"not": "an event"}`)
	run(t, src, s)
	waitFor(t, "all good messages deleted", func() bool { return f.left() == 1 })
	recs, seen := counts(t, s)
	if recs != 25 || seen != 26 {
		t.Fatalf("records %d (want 25), deliveries seen %d (want 26)", recs, seen)
	}
}

// TestLedgerDownNoDelete: while the ledger fails nothing is deleted; the
// messages come back after their visibility timeout and are recorded once the
// ledger is back.
func TestLedgerDownNoDelete(t *testing.T) {
	f, s, src := setup(t, time.Second)
	f.send(body("k", 1))
	s.fail.Store(true)
	stop := run(t, src, s)
	waitFor(t, "a failed submit", func() bool { return s.calls.Load() >= 1 })
	f.mu.Lock()
	deletes := f.deletes
	f.mu.Unlock()
	if deletes != 0 || f.left() != 1 {
		t.Fatalf("deleted %d while the ledger failed", deletes)
	}
	s.fail.Store(false)
	waitFor(t, "redelivered and deleted", func() bool { return f.left() == 0 })
	stop()
	if recs, _ := counts(t, s); recs != 1 {
		t.Fatalf("records %d, want 1", recs)
	}
}

// TestPartialDeleteFailure: delete entries that fail are retried.
func TestPartialDeleteFailure(t *testing.T) {
	f, s, src := setup(t, 30*time.Second)
	for i := range 10 {
		f.send(body(fmt.Sprint("k", i), 1))
	}
	f.failDeletes = 3
	run(t, src, s)
	waitFor(t, "all deleted despite failed entries", func() bool { return f.left() == 0 })
	if recs, seen := counts(t, s); recs != 10 || seen != 10 {
		t.Fatalf("records %d seen %d, want 10 and 10 (no redelivery needed)", recs, seen)
	}
}

// TestVisibilityExtended: a slow ledger write outlasting the visibility
// timeout is covered by extensions, so the message is not delivered twice.
func TestVisibilityExtended(t *testing.T) {
	f, s, src := setup(t, 3*time.Second)
	s.stall = 5 * time.Second
	f.send(body("slow", 1))
	run(t, src, s)
	waitFor(t, "deleted", func() bool { return f.left() == 0 })
	f.mu.Lock()
	extends := f.extends
	f.mu.Unlock()
	if _, seen := counts(t, s); seen != 1 || extends == 0 {
		t.Fatalf("seen %d (want 1: no redelivery), visibility extensions %d (want some)", seen, extends)
	}
}

func TestFromURL(t *testing.T) {
	src, err := sqssrc.FromURL(context.Background(), "sqs://sqs.eu-west-1.amazonaws.com/123456789012/uploads?visibility=2m", nil)
	if err != nil || src.Name() != "sqs" {
		t.Fatal(src, err)
	}
	for _, bad := range []string{"sqs://", "sqs://h/q?colour=red", "sqs://h/q?visibility=0s", "https://x/q"} {
		if _, err := sqssrc.FromURL(context.Background(), bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
