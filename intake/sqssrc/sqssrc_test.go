package sqssrc_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/sqssrc"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// sink records into a real SQLite ledger, optionally failing or stalling.
type sink struct {
	l     *ledger.Ledger
	fail  atomic.Bool
	stall time.Duration
	calls atomic.Int64
	// refused counts the messages the source refused without submitting
	// them (Sink.Refused).
	refused atomic.Int64
}

func (s *sink) Refused(source string, n int) {
	if source == "sqs" {
		s.refused.Add(int64(n))
	}
}

func (s *sink) Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return nil, ledger.ErrUnavailable
	}
	time.Sleep(s.stall)
	return s.l.Record(ctx, source, evs)
}

// logs collects the source's log lines and also passes them to t.Log, so a
// failing test shows what the source saw.
type logs struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func setup(t *testing.T, vis time.Duration, opts ...func(*sqssrc.Options)) (*fakeSQS, *sink, *sqssrc.Source) {
	f, s, src, _ := setupLogs(t, vis, opts...)
	return f, s, src
}

func setupLogs(t *testing.T, vis time.Duration, opts ...func(*sqssrc.Options)) (*fakeSQS, *sink, *sqssrc.Source, *logs) {
	t.Helper()
	f := newFakeSQS(t)
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// No SDK-level retries: the source's own retries are under test.
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	lg := &logs{t: t}
	o := sqssrc.Options{Client: c, Visibility: vis, Wait: time.Second,
		Logger: slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, fn := range opts {
		fn(&o)
	}
	src, err := sqssrc.Open(context.Background(), f.queueURL(), &o)
	if err != nil {
		t.Fatal(err)
	}
	return f, &sink{l: l}, src, lg
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
	f, s, src := setup(t, 30*time.Second, func(o *sqssrc.Options) { o.Poison = sqssrc.PoisonDLQ })
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

// TestDeleteRequestsFailing: whole DeleteMessageBatch requests that fail
// (500) are retried with backoff while the receipt handles are valid, not
// given up after a fixed three attempts (the messages then came back after
// their visibility timeout and were recorded twice).
func TestDeleteRequestsFailing(t *testing.T) {
	f, s, src := setup(t, 30*time.Second)
	for i := range 4 {
		f.send(body(fmt.Sprint("k", i), 1))
	}
	f.failDeleteRequests = 5
	run(t, src, s)
	waitFor(t, "all deleted despite 5 failed delete requests", func() bool { return f.left() == 0 })
	if recs, seen := counts(t, s); recs != 4 || seen != 4 {
		t.Fatalf("records %d seen %d, want 4 and 4 (no redelivery needed)", recs, seen)
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

const poisonBody = `{"not": "an event", "secret": "\u001b]0;x\u0007"}`

// TestPoisonDeletedWithoutRedrive: on a queue without a redrive policy, a
// message that is not an event is logged with its body and deleted, not
// received again for ever; the good messages beside it are recorded.
func TestPoisonDeletedWithoutRedrive(t *testing.T) {
	for _, policy := range []sqssrc.Poison{"", sqssrc.PoisonDelete} {
		t.Run("policy="+string(policy), func(t *testing.T) {
			f, s, src, lg := setupLogs(t, time.Second, func(o *sqssrc.Options) { o.Poison = policy })
			if policy == sqssrc.PoisonDelete {
				f.redrive = `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"5"}`
			}
			f.send(body("good", 1))
			f.send(poisonBody)
			f.send(`{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"bad\u0000key","sequencer":"01"}}}]}`)
			run(t, src, s)
			waitFor(t, "poison deleted", func() bool { return f.left() == 0 })
			// The good one, and each poison message kept as a refused
			// message (a dead letter with its reason).
			if recs, _ := counts(t, s); recs != 3 {
				t.Fatalf("records %d, want 3", recs)
			}
			out := lg.String()
			if !strings.Contains(out, "deleted (its body is logged here)") || !strings.Contains(out, `an event`) || !strings.Contains(out, "receive_count=1") {
				t.Fatalf("the poison message's body is not in the log:\n%s", out)
			}
			if strings.Contains(out, "\x1b") {
				t.Fatal("raw escape character in the text log")
			}
		})
	}
}

// TestPoisonLeftForRedrive: with a redrive policy (or when it cannot be read,
// or with poison=dlq), a poison message is left for SQS to dead-letter; the
// good messages are recorded and deleted.
func TestPoisonLeftForRedrive(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(f *fakeSQS)
		opt   sqssrc.Poison
	}{
		{"redrive policy", func(f *fakeSQS) {
			f.redrive = `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"5"}`
		}, ""},
		{"attributes denied", func(f *fakeSQS) { f.denyAttributes = true }, ""},
		{"explicit dlq", func(*fakeSQS) {}, sqssrc.PoisonDLQ},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, s, src := setup(t, time.Second, func(o *sqssrc.Options) { o.Poison = c.opt })
			c.setup(f)
			f.send(body("good", 1))
			f.send(poisonBody)
			run(t, src, s)
			waitFor(t, "poison received again", func() bool { return f.receivesOf(poisonBody) >= 2 })
			waitFor(t, "good deleted", func() bool { return f.left() == 1 })
			if f.receivesOf(poisonBody) < 2 {
				t.Fatal("the poison message was deleted")
			}
			// Each receipt of the poison message is counted as refused (the
			// second one after the fake handed it out: waited for).
			waitFor(t, "the sink told of two refusals", func() bool { return s.refused.Load() >= 2 })
		})
	}
}

func TestPoisonOption(t *testing.T) {
	if _, err := sqssrc.FromURL(context.Background(), "sqs://h/000000000000/q?poison=drop", nil); err == nil {
		t.Fatal("poison=drop accepted")
	}
	if _, err := sqssrc.FromURL(context.Background(), "sqs://h/000000000000/q?poison=delete", nil); err != nil {
		t.Fatal(err)
	}
}
