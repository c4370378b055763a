package awslambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// sqsMsg is one message of an SQS batch built for a test.
type sqsMsg struct {
	id, group, body string
}

// sqsBatch renders msgs as the payload Lambda's SQS event source sends.
func sqsBatch(msgs ...sqsMsg) []byte {
	var b events.SQSEvent
	for _, m := range msgs {
		r := events.SQSMessage{MessageId: m.id, Body: m.body, EventSource: "aws:sqs", ReceiptHandle: "rh-" + m.id,
			EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:q", AWSRegion: "us-east-1",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
		if m.group != "" {
			r.Attributes["MessageGroupId"] = m.group
			r.EventSourceARN += ".fifo"
		}
		b.Records = append(b.Records, r)
	}
	out, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return out
}

func s3Body(key, seq string) string { return string(event.S3Body(eventtest.Created("b", key, seq))) }

// recorder is a handler that counts its runs per key and can be made to
// block or fail.
type recorder struct {
	mu      sync.Mutex
	runs    map[string]int
	tokens  map[string][]int64
	running map[string]bool
	overlap atomic.Bool
	block   func(ctx context.Context, w intake.Work) error
}

func newRecorder() *recorder {
	return &recorder{runs: map[string]int{}, tokens: map[string][]int64{}, running: map[string]bool{}}
}

func (r *recorder) Handle(ctx context.Context, w intake.Work) (string, error) {
	r.mu.Lock()
	if r.running[w.Event.Key] {
		r.overlap.Store(true)
	}
	r.running[w.Event.Key] = true
	r.runs[w.Event.Key]++
	r.tokens[w.Event.Key] = append(r.tokens[w.Event.Key], w.Token)
	block := r.block
	r.mu.Unlock()
	var err error
	if block != nil {
		err = block(ctx, w)
	}
	r.mu.Lock()
	r.running[w.Event.Key] = false
	r.mu.Unlock()
	return "ok", err
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// sharedLedger is an object-store ledger in memory: shared by every
// invocation of the test's Function, as the bucket is by every sandbox.
func sharedLedger(t *testing.T, opts *ledger.Options) *ledger.Ledger {
	t.Helper()
	l, err := objledger.Open(context.Background(), objstore.New(mem.OpenBackend(""), nil), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newFunction(t *testing.T, l *ledger.Ledger, h intake.Handler, o *awslambda.Options) *awslambda.Function {
	t.Helper()
	f, err := awslambda.New(l, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func invoke(t *testing.T, f *awslambda.Function, timeout time.Duration, payload []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := f.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	return out
}

func state(t *testing.T, l *ledger.Ledger, key string) ledger.Status {
	t.Helper()
	rs, err := l.Get(context.Background(), "b", key)
	if err != nil || len(rs) != 1 {
		t.Fatalf("ledger record of %q: %+v %v", key, rs, err)
	}
	return rs[0].Status
}

// The partial batch response names exactly the messages that are not in the
// ledger, compared against golden JSON; the good messages of the batch are
// recorded and handled.
func TestSQSBatchResponses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		poison awslambda.Poison
		msgs   []sqsMsg
		golden string
		ran    []string
	}{
		{"all good", "", []sqsMsg{{id: "m1", body: s3Body("a", "01")}, {id: "m2", body: s3Body("b", "01")}},
			`{"batchItemFailures":[]}`, []string{"a", "b"}},
		{"poison alone fails (dlq)", "", []sqsMsg{{id: "m1", body: s3Body("a", "01")}, {id: "m2", body: "not json"}, {id: "m3", body: `{"hello":1}`}, {id: "m4", body: s3Body("b", "01")}},
			`{"batchItemFailures":[{"itemIdentifier":"m2"},{"itemIdentifier":"m3"}]}`, []string{"a", "b"}},
		{"poison kept in the ledger", awslambda.PoisonLedger, []sqsMsg{{id: "m1", body: s3Body("a", "01")}, {id: "m2", body: "not json"}},
			`{"batchItemFailures":[]}`, []string{"a"}},
		{"fifo: the rest of a failed group fails, other groups go on", "", []sqsMsg{
			{id: "m1", group: "g1", body: s3Body("a", "01")},
			{id: "m2", group: "g2", body: s3Body("c", "01")},
			{id: "m3", group: "g1", body: "poison"},
			{id: "m4", group: "g2", body: s3Body("d", "01")},
			{id: "m5", group: "g1", body: s3Body("b", "01")},
		}, `{"batchItemFailures":[{"itemIdentifier":"m3"},{"itemIdentifier":"m5"}]}`, []string{"a", "c", "d"}},
		{"s3 test event", "", []sqsMsg{{id: "m1", body: `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-27T10:00:00.000Z","Bucket":"b","RequestId":"R","HostId":"H"}`}},
			`{"batchItemFailures":[]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := sharedLedger(t, nil)
			h := newRecorder()
			f := newFunction(t, l, h, &awslambda.Options{Poison: tc.poison})
			out := invoke(t, f, 10*time.Second, sqsBatch(tc.msgs...))
			if string(out) != tc.golden {
				t.Errorf("answer:\n got %s\nwant %s", out, tc.golden)
			}
			for _, k := range tc.ran {
				if n := h.count(k); n != 1 {
					t.Errorf("%q ran %d times, want 1", k, n)
				}
				if st := state(t, l, k); st != ledger.Processed {
					t.Errorf("%q is %s, want done", k, st)
				}
			}
			for _, k := range []string{"b", "d"} {
				if !contains(tc.ran, k) {
					if rs, _ := l.Get(context.Background(), "b", k); len(rs) != 0 {
						t.Errorf("%q of a failed message was recorded: %+v", k, rs)
					}
				}
			}
		})
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Every recorded fixture of another project reaches the handler through
// every way Lambda delivers it: directly, in an SQS batch, wrapped in SNS,
// and SNS through SQS.
func TestRecordedFixtures(t *testing.T) {
	t.Parallel()
	var files []string
	for _, dir := range []string{"aws-lambda-go", "powertools"} {
		fs, err := filepath.Glob(filepath.Join("..", "..", "event", "testdata", dir, "*.json"))
		if err != nil || len(fs) == 0 {
			t.Fatalf("no fixtures in %s: %v", dir, err)
		}
		files = append(files, fs...)
	}
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want, perr := event.Parse(body) // a fixture cairn refuses (a made-up sequencer) must be refused alike
		snsBody, _ := json.Marshal(map[string]any{"Type": "Notification", "MessageId": "sns-1", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": string(body)})
		var snsDirect events.SNSEvent
		snsDirect.Records = []events.SNSEventRecord{{EventSource: "aws:sns", EventVersion: "1.0", SNS: events.SNSEntity{MessageID: "sns-1", Type: "Notification", Message: string(body)}}}
		snsPayload, _ := json.Marshal(snsDirect)
		for _, way := range []struct {
			name    string
			payload []byte
			sqs     bool
		}{
			{"direct", body, false},
			{"sqs", sqsBatch(sqsMsg{id: "m1", body: string(body)}), true},
			{"sns", snsPayload, false},
			{"sns-sqs", sqsBatch(sqsMsg{id: "m1", body: string(snsBody)}), true},
		} {
			t.Run(filepath.Base(file)+"/"+way.name, func(t *testing.T) {
				t.Parallel()
				l := sharedLedger(t, nil)
				var mu sync.Mutex
				seen := map[string]bool{}
				h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
					mu.Lock()
					seen[w.Event.Bucket+"/"+w.Event.Key] = true
					mu.Unlock()
					return "", nil
				})
				f := newFunction(t, l, h, nil)
				out := invoke(t, f, 10*time.Second, way.payload)
				wantAnswer := `{"batchItemFailures":[]}`
				if perr != nil {
					wantAnswer = `{"batchItemFailures":[{"itemIdentifier":"m1"}]}`
				}
				if way.sqs && string(out) != wantAnswer {
					t.Errorf("answer %s, want %s (parse: %v)", out, wantAnswer, perr)
				}
				for _, ev := range want {
					if ev.Kind == event.Test || ev.Kind == event.Other {
						continue
					}
					rs, err := l.Get(context.Background(), ev.Bucket, ev.Key)
					if err != nil || len(rs) == 0 {
						t.Errorf("%s/%s not in the ledger: %v", ev.Bucket, ev.Key, err)
					}
				}
				if !way.sqs {
					var sum awslambda.Summary
					if err := json.Unmarshal(out, &sum); err != nil || (sum.Refused != 0) != (perr != nil) {
						t.Errorf("summary %s: %v (parse: %v)", out, err, perr)
					}
				}
			})
		}
	}
}

// What is no event in a direct invocation is kept in the ledger as a dead
// letter, and the invocation succeeds (an error would only have Lambda retry
// it twice, then drop it).
func TestDirectPoisonKept(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	f := newFunction(t, l, newRecorder(), nil)
	out := invoke(t, f, 10*time.Second, []byte(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":""}}}]}`))
	var sum awslambda.Summary
	if err := json.Unmarshal(out, &sum); err != nil || sum.Refused != 1 {
		t.Fatalf("summary %s: %v", out, err)
	}
	dead, err := l.List(context.Background(), ledger.Filter{Bucket: intake.RefusedBucket})
	if err != nil || len(dead) != 1 || dead[0].Status != ledger.Dead {
		t.Fatalf("refused records: %+v %v", dead, err)
	}
}

// A ledger that cannot record fails the whole invocation (Lambda delivers it
// again), never answers a partial success.
func TestRecordFailureFailsInvocation(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	f := newFunction(t, l, newRecorder(), nil)
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, payload := range [][]byte{
		sqsBatch(sqsMsg{id: "m1", body: s3Body("a", "01")}, sqsMsg{id: "m2", body: s3Body("b", "01")}),
		[]byte(s3Body("a", "01")),
	} {
		out, err := f.Invoke(ctx, payload)
		if err == nil {
			t.Errorf("Invoke on a closed ledger answered %s", out)
		}
	}
}

// The same event delivered to two invocations at once runs the handler once;
// events of one key delivered at once to several invocations never run
// overlapping, and the newest runs last.
func TestConcurrentInvocations(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	h := newRecorder()
	h.block = func(ctx context.Context, w intake.Work) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	f := newFunction(t, l, h, nil)
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			payload := []byte(s3Body("same", "01"))
			if i%2 == 1 {
				payload = sqsBatch(sqsMsg{id: fmt.Sprint(i), body: s3Body("k", fmt.Sprintf("%02d", i))})
			}
			invoke(t, f, 10*time.Second, payload)
		})
	}
	wg.Wait()
	if got := h.count("same"); got != 1 {
		t.Errorf("a duplicate ran %d times", got)
	}
	if h.overlap.Load() {
		t.Error("two runs of one key overlapped")
	}
	rs, err := l.Get(context.Background(), "b", "k")
	if err != nil || len(rs) != 1 || rs[0].Status != ledger.Processed || rs[0].Seq != "05" {
		t.Errorf("key k ends %+v %v, want the newest (05) done", rs, err)
	}
}

// A handler still running StopBefore the invocation's deadline is stopped,
// its attempt settled as a retry before the invocation returns; a drain
// later runs it again with a higher token.
func TestDeadlineStopsAndDrainRuns(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, &ledger.Options{RetryBase: 10 * time.Millisecond, RetryMax: 10 * time.Millisecond})
	h := newRecorder()
	var slow atomic.Bool
	slow.Store(true)
	h.block = func(ctx context.Context, w intake.Work) error {
		if !slow.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	f := newFunction(t, l, h, &awslambda.Options{StopBefore: 500 * time.Millisecond})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	out, err := f.Invoke(ctx, []byte(s3Body("slow", "01")))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("the invocation returned after its deadline")
	}
	var sum awslambda.Summary
	if err := json.Unmarshal(out, &sum); err != nil || sum.Handled[intake.OutcomeRetry] != 1 {
		t.Fatalf("summary %s: %v", out, err)
	}
	if st := state(t, l, "slow"); st != ledger.Failed {
		t.Fatalf("after the deadline the record is %s, want failed (a retry)", st)
	}
	slow.Store(false)
	time.Sleep(50 * time.Millisecond) // the retry's backoff
	invoke(t, f, 5*time.Second, []byte(awslambda.DrainPayload))
	if st := state(t, l, "slow"); st != ledger.Processed {
		t.Fatalf("after the drain the record is %s, want done", st)
	}
	h.mu.Lock()
	toks := h.tokens["slow"]
	h.mu.Unlock()
	if len(toks) != 2 || toks[1] <= toks[0] {
		t.Errorf("tokens %v, want two runs with a rising token", toks)
	}
}

// A drain runs the scheduled jobs, and what they submitted, and the purge.
func TestDrainRunsJobs(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	h := newRecorder()
	ran := 0
	jobs := []intake.Job{{Name: "audit", Every: time.Hour, Run: func(ctx context.Context) error {
		ran++
		_, err := l.Record(ctx, "audit", []event.Event{eventtest.Created("b", "found", "01")})
		return err
	}}, {Name: "broken", Every: time.Hour, Run: func(context.Context) error { return errors.New("boom") }}}
	f := newFunction(t, l, h, &awslambda.Options{Jobs: jobs, Retention: time.Hour})
	// A drain (EventBridge's scheduled event, every minute) runs no jobs.
	out := invoke(t, f, 10*time.Second, []byte(`{"version":"0","id":"x","detail-type":"Scheduled Event","source":"aws.events","account":"1","time":"2026-11-27T10:00:00Z","region":"us-east-1","resources":["arn:aws:events:us-east-1:1:rule/drain"],"detail":{}}`))
	var sum awslambda.Summary
	if err := json.Unmarshal(out, &sum); err != nil || sum.Kind != "drain" || ran != 0 {
		t.Fatalf("drain: summary %s, jobs ran %d: %v", out, ran, err)
	}
	out = invoke(t, f, 10*time.Second, []byte(awslambda.JobsPayload))
	if ran != 1 || h.count("found") != 1 {
		t.Fatalf("jobs ran %d, handler ran the audit's find %d times", ran, h.count("found"))
	}
	if err := json.Unmarshal(out, &sum); err != nil || sum.Kind != "jobs" || !strings.Contains(sum.Errors, "boom") {
		t.Fatalf("summary %s: %v", out, err)
	}
}

// A ledger on the sandbox's own disk is refused, saying why and what to use.
func TestNewRefusesLocalLedger(t *testing.T) {
	t.Parallel()
	_, err := awslambda.New(testledger.New(t, nil), newRecorder(), nil) // SQLite
	if err == nil || !strings.Contains(err.Error(), "twice") || !strings.Contains(err.Error(), "s3://") {
		t.Fatalf("New on a SQLite ledger: %v", err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	for _, o := range []*awslambda.Options{{Poison: "drop"}, {StopBefore: -1}, {Pipeline: intake.Options{Lease: time.Second}}, {Retention: time.Minute}} {
		if _, err := awslambda.New(l, newRecorder(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// A handler that starts late in the invocation is stopped at the same time
// as one that started early (StopBefore the deadline), never later (it was
// given a per-attempt timeout from its own start once, and ran on past the
// stop time to be cut, uncounted, by the shutdown); and an attempt claimed in
// the second half of the invocation and cut there is released uncounted
// (review: work that fits easily became a dead letter, claimed late and cut
// in invocation after invocation).
func TestLateHandlerStoppedAtStopTime(t *testing.T) {
	t.Parallel()
	l := sharedLedger(t, nil)
	h := newRecorder()
	var first atomic.Bool
	var lateDeadline atomic.Int64
	h.block = func(ctx context.Context, w intake.Work) error {
		if first.CompareAndSwap(false, true) {
			time.Sleep(1200 * time.Millisecond)
			return nil
		}
		d, _ := ctx.Deadline()
		lateDeadline.Store(d.UnixNano())
		<-ctx.Done()
		return ctx.Err()
	}
	f := newFunction(t, l, h, &awslambda.Options{StopBefore: 600 * time.Millisecond, Pipeline: intake.Options{Concurrency: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	invDeadline, _ := ctx.Deadline()
	out, err := f.Invoke(ctx, event.S3Body(eventtest.Created("b", "x", "01"), eventtest.Created("b", "y", "01")))
	if err != nil {
		t.Fatal(err)
	}
	var sum awslambda.Summary
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatal(err)
	}
	if stopAt := invDeadline.Add(-600 * time.Millisecond); lateDeadline.Load() == 0 || time.Unix(0, lateDeadline.Load()).After(stopAt) {
		t.Errorf("the late handler's context ends at %v, after the stop time %v", time.Unix(0, lateDeadline.Load()), stopAt)
	}
	if sum.Handled[intake.OutcomeProcessed] != 1 || sum.Handled[intake.OutcomeReleased] != 1 || len(sum.Handled) != 2 {
		t.Errorf("handled %v, want one processed and one released (claimed in the second half, cut at the stop time)", sum.Handled)
	}
}

// Hostile SQS batches are answered per message, golden: a record without a
// messageId (it cannot be named: an empty itemIdentifier fails the whole
// batch) or that is no object is kept as a dead letter; a record with a
// field of the wrong type is refused alone (found in review: the batch was
// then read as a direct invocation, answered with a summary that Lambda
// takes for "all succeeded").
func TestSQSHostileRecords(t *testing.T) {
	t.Parallel()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	good := `{"eventSource":"aws:sqs","messageId":"m1","body":` + q(s3Body("a", "01")) + `}`
	for _, tc := range []struct {
		name, payload, golden string
		dead                  int
	}{
		{"record without messageId", `{"Records":[` + good + `,{"eventSource":"aws:sqs","body":"poison"}]}`, `{"batchItemFailures":[]}`, 1},
		{"record that is no object", `{"Records":[` + good + `,42]}`, `{"batchItemFailures":[]}`, 1},
		{"field of a wrong type", `{"Records":[` + good + `,{"eventSource":"aws:sqs","messageId":"m2","body":"poison","attributes":{"ApproximateReceiveCount":1}}]}`,
			`{"batchItemFailures":[{"itemIdentifier":"m2"}]}`, 0},
		{"body of a wrong type", `{"Records":[` + good + `,{"eventSource":"aws:sqs","messageId":"m2","body":{"Records":[]}}]}`,
			`{"batchItemFailures":[{"itemIdentifier":"m2"}]}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := sharedLedger(t, nil)
			h := newRecorder()
			f := newFunction(t, l, h, nil)
			out := invoke(t, f, 10*time.Second, []byte(tc.payload))
			if string(out) != tc.golden {
				t.Errorf("answer %s, want %s", out, tc.golden)
			}
			if h.count("a") != 1 {
				t.Errorf("the good message's key ran %d times", h.count("a"))
			}
			dead, err := l.List(context.Background(), ledger.Filter{Bucket: intake.RefusedBucket})
			if err != nil || len(dead) != tc.dead {
				t.Errorf("refused records: %+v %v, want %d", dead, err, tc.dead)
			}
		})
	}
}
