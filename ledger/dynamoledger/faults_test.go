package dynamoledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
)

// A fault is what the injector does to one request.
type fault int

const (
	pass          fault = iota
	loseRequest         // never sent; the client sees a reset connection
	loseResponse        // sent and applied; the client sees a reset connection
	lateRequest         // the client sees a reset connection at once; the request lands later
	throttle            // answered 400 ThrottlingException, not sent
	overProvision       // answered 400 ProvisionedThroughputExceededException, not sent
)

// injector is an HTTP client that applies planned faults to the requests of
// one DynamoDB operation (X-Amz-Target), in order: the first request of the
// operation gets plan[0], the next plan[1], and so on; the rest pass.
type injector struct {
	base *http.Transport
	mu   sync.Mutex
	op   string
	plan []fault
	seen int
	late sync.WaitGroup
}

func newInjector(t *testing.T) *injector {
	in := &injector{base: &http.Transport{}}
	t.Cleanup(func() {
		in.late.Wait()
		in.base.CloseIdleConnections()
	})
	return in
}

// arm plans faults for the next requests of op (PutItem, DeleteItem, …).
func (in *injector) arm(op string, plan ...fault) {
	in.mu.Lock()
	in.op, in.plan, in.seen = "DynamoDB_20120810."+op, plan, 0
	in.mu.Unlock()
}

// applied is how many requests of the armed operation were seen.
func (in *injector) applied() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.seen
}

func (in *injector) client() *http.Client { return &http.Client{Transport: in} }

var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func (in *injector) RoundTrip(req *http.Request) (*http.Response, error) {
	in.mu.Lock()
	return in.roundTrip(req)
}

// roundTrip is RoundTrip with in.mu held, which it unlocks.
func (in *injector) roundTrip(req *http.Request) (*http.Response, error) {
	f := pass
	if req.Header.Get("X-Amz-Target") == in.op {
		if in.seen < len(in.plan) {
			f = in.plan[in.seen]
		}
		in.seen++
	}
	in.mu.Unlock()
	switch f {
	case loseRequest:
		return nil, errReset
	case loseResponse:
		resp, err := in.base.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, errReset
	case lateRequest:
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		late := req.Clone(context.Background())
		late.Body = io.NopCloser(bytes.NewReader(body))
		in.late.Go(func() {
			time.Sleep(300 * time.Millisecond)
			if resp, err := in.base.RoundTrip(late); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		return nil, errReset
	case throttle, overProvision:
		name := "ThrottlingException"
		if f == overProvision {
			name = "ProvisionedThroughputExceededException"
		}
		body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected"}`, name)
		return &http.Response{StatusCode: 400, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"injected"}},
			Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	return in.base.RoundTrip(req)
}

// TestLostAnswers: a conditional write the server applied but whose answer
// was lost (the SDK retries it, and the retry is refused because the first
// attempt landed; or every attempt's answer is lost and the SDK gives up)
// neither doubles nor loses a decision, a claim, a completion or a purge;
// requests lost before they were sent, or landing late, neither.
func TestLostAnswers(t *testing.T) {
	t.Parallel()
	lostAll := make([]fault, 10) // every attempt the SDK makes
	for i := range lostAll {
		lostAll[i] = loseResponse
	}
	for _, tc := range []struct {
		name string
		plan []fault
	}{
		{"response lost once", []fault{loseResponse}},
		{"every response lost", lostAll},
		{"request lost", []fault{loseRequest, loseRequest}},
		{"request lands late", []fault{lateRequest}},
		{"late, then lost", []fault{lateRequest, loseResponse}},
		{"throttled", []fault{throttle, overProvision, throttle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			in := newInjector(t)
			clk := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var cmu sync.Mutex
			now := func() time.Time { cmu.Lock(); defer cmu.Unlock(); return clk }
			l := open(t, newTable(t), &ledger.Options{Now: now}, in.client())
			ev := func(seq string) event.Event {
				return event.Event{Bucket: "b", Key: "k", Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e" + seq}
			}
			step := func(what string, fn func() error) {
				t.Helper()
				in.arm("PutItem", tc.plan...)
				if err := fn(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if in.applied() < len(tc.plan) {
					t.Fatalf("%s: %d requests, fewer than the %d faults planned", what, in.applied(), len(tc.plan))
				}
				in.arm("")
				in.late.Wait()
			}
			var ds []ledger.Decision
			step("record", func() (err error) { ds, err = l.Record(ctx, "s", []event.Event{ev("01")}); return })
			if ds[0].Outcome != ledger.Accepted {
				t.Fatalf("first delivery decided %s, want new", ds[0].Outcome)
			}
			step("record again", func() (err error) { ds, err = l.Record(ctx, "s", []event.Event{ev("02")}); return })
			if ds[0].Outcome != ledger.Coalesced {
				t.Fatalf("newer delivery decided %s, want coalesced", ds[0].Outcome)
			}
			var cs []ledger.Claim
			step("claim", func() (err error) { cs, err = l.Claim(ctx, 10, time.Minute); return })
			if len(cs) != 1 || cs[0].Token < 1 || cs[0].Attempts != 1 {
				t.Fatalf("claims %+v, want one, its first claim", cs)
			}
			if more, err := l.Claim(ctx, 10, time.Minute); err != nil || len(more) != 0 {
				t.Fatalf("claimed again: %+v %v", more, err)
			}
			step("complete", func() error { return l.Complete(ctx, cs[0], "done") })
			r, err := l.Get(ctx, "b", "k")
			if err != nil {
				t.Fatal(err)
			}
			if r[0].Status != ledger.Processed || r[0].Seen != 2 || r[0].Token != cs[0].Token || r[0].Attempts != 1 || r[0].Seq != "02" || r[0].Result != "done" {
				t.Fatalf("record %+v, want processed at 02, seen twice, by the one claim (token %d)", r[0], cs[0].Token)
			}
			cmu.Lock()
			clk = clk.Add(48 * time.Hour)
			cmu.Unlock()
			in.arm("DeleteItem", tc.plan...)
			n, err := l.Purge(ctx, now().Add(-time.Hour), false)
			in.arm("")
			in.late.Wait()
			if err != nil || n != 1 {
				t.Fatalf("purge: %d, %v; want 1", n, err)
			}
			if _, err := l.Get(ctx, "b", "k"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("after purge: %v", err)
			}
		})
	}
}

// chaos is an HTTP client that, at random, loses one request or answer in
// rate, lands one late, or throttles it: every kind of request, every
// operation.
type chaos struct {
	*injector
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
}

func (c *chaos) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	f := pass
	if c.rng.Float64() < c.rate {
		f = []fault{loseRequest, loseResponse, lateRequest, throttle, overProvision}[c.rng.IntN(5)]
	}
	c.mu.Unlock()
	c.injector.mu.Lock()
	c.injector.op, c.injector.plan, c.injector.seen = req.Header.Get("X-Amz-Target"), []fault{f}, 0
	return c.injector.roundTrip(req)
}

// TestConformanceUnderFaults runs the conformance suite with 5% of all
// requests lost before or after the server applied them, landing late, or
// throttled: no case may tell.
func TestConformanceUnderFaults(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: -short")
	}
	ledgertest.Run(t, ledgertest.Harness{
		New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
			url := newTable(t)
			c := &chaos{injector: newInjector(t), rng: rand.New(rand.NewPCG(1, uint64(len(t.Name())))), rate: 0.05}
			return open(t, url, opts, &http.Client{Transport: c}), url
		},
		Env: testenv.DynamoDBEnv(),
		// The process cases' children open the ledger without faults; they
		// run in TestConformance.
		Only: []string{"Basics", "Permutations", "PermutationsWhileClaimed", "NewerWhileClaimed", "LeaseExpiryAndFencing",
			"RetryThenDead", "CompleteBatchAndRelease", "CompleteBatchRules", "RecordAndClaim", "RecordAndClaimOldestFirst",
			"EventRoundTrip", "Lookup", "ReplayAndPurge", "EveryVersion", "Unordered", "ListAndCounts", "DuplicateStormGoroutines",
			"NoLostUpdates", "NoDeadlocks", "TwoHandles"},
	})
}
