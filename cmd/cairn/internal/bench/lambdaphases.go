package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
)

// LambdaPhases profiles one invocation of the Lambda function in process
// (package awslambda, as the bootstrap runs it, without the runtime API) on
// the ledger at ledgerURL: in each of sandboxes sandboxes (a ledger opened
// apart, as in its own process), n SQS batches of batch fresh keys, one at a
// time, beside the other sandboxes; a no-op handler. For each invocation it times each ledger call by kind
// (RecordAndClaim: the record; Claim: Pipeline.Quiesce's claims, the last of
// which finds nothing; CompleteBatch; Flush: the object-store ledger's work
// index, once while the handlers run and once after; Renew, Fail, Release)
// and the handlers, and writes each one's p50 and p99 per invocation, its
// calls per invocation, and the invocation's total, to w. Calls that overlap
// (the first Flush runs beside the handlers and completions) are each
// counted whole, so the phases can add up to more than the total.
func LambdaPhases(ctx context.Context, w io.Writer, ledgerURL string, sandboxes, n, batch int) error {
	run := time.Now().UnixNano()
	var seq atomic.Int64
	var mu sync.Mutex
	per := map[string]Latencies{}
	calls := map[string]int{}
	reqs := map[string]int64{}
	var totals Latencies
	// Each sandbox is a ledger opened on its own (as in its own process) and
	// a Function over it, invoked n times back to back beside the others.
	// An S3 or DynamoDB ledger is reached through a counting proxy: each
	// call's requests are counted too (calls that overlap each count the
	// others' requests made meanwhile: approximate).
	openURL := ledgerURL
	var cnt *counter
	if endpoint, rewrite, ok := through(ledgerURL); ok {
		c, err := newCounter(endpoint)
		if err != nil {
			return err
		}
		defer c.srv.Close()
		cnt, openURL = c, rewrite(c.url)
	}
	sandbox := func() error {
		inner, err := ledger.Open(ctx, openURL, nil)
		if err != nil {
			return err
		}
		defer inner.Close()
		tb := &timedBackend{Backend: inner.Backend(), cnt: cnt, cur: map[string]time.Duration{}, calls: map[string]int{}, reqs: map[string]int64{}}
		var handlerNS atomic.Int64
		h := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
			t0 := time.Now()
			defer func() { handlerNS.Add(int64(time.Since(t0))) }()
			return "", nil
		})
		f, err := awslambda.New(ledger.New(tb), h, nil)
		if err != nil {
			return err
		}
		for i := range n + 2 { // the first two warm up (connections, the ledger's heads)
			p := sqsPayload(batch, func() event.Event {
				i := seq.Add(1)
				return event.Event{Bucket: "bench", Key: fmt.Sprintf("lambda-phases/%x/%d", run, i), Kind: event.Created,
					Name: "ObjectCreated:Put", ETag: "0123456789abcdef0123456789abcdef", Size: 1, Sequencer: fmt.Sprintf("%016X", i), Time: time.Now().UTC()}
			})
			tb.reset()
			handlerNS.Store(0)
			t0 := time.Now()
			ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, err := f.Invoke(ictx, p)
			cancel()
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if string(out) != `{"batchItemFailures":[]}` {
				return fmt.Errorf("an invocation answered %s", out)
			}
			if i < 2 {
				continue
			}
			cur, cc, rq := tb.snapshot()
			cur["handlers (sum)"] = time.Duration(handlerNS.Load())
			mu.Lock()
			totals = append(totals, d)
			for k, v := range cur {
				per[k] = append(per[k], v)
			}
			for k, v := range cc {
				calls[k] += v
			}
			for k, v := range rq {
				reqs[k] += v
			}
			mu.Unlock()
		}
		return nil
	}
	var g errgroup.Group
	for range max(sandboxes, 1) {
		g.Go(sandbox)
	}
	if err := g.Wait(); err != nil {
		return err
	}
	n *= max(sandboxes, 1)
	fmt.Fprintf(w, "%s\n", safetext.URL(ledgerURL))
	names := make([]string, 0, len(per))
	for k := range per {
		names = append(names, k)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase (per invocation of %d events, %d invocations, %d sandboxes)\tp50\tp99\tcalls/invocation\trequests/invocation (approx.)\t\n", batch, n, max(sandboxes, 1))
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	for _, k := range names {
		// An invocation without the call counts 0 for it.
		l := per[k]
		for len(l) < n {
			l = append(l, 0)
		}
		rq := "-"
		if cnt != nil && k != "handlers (sum)" {
			rq = fmt.Sprintf("%.1f", float64(reqs[k])/float64(n))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t\n", k, ms(l.Percentile(50)), ms(l.Percentile(99)), float64(calls[k])/float64(n), rq)
	}
	total := "-"
	if cnt != nil {
		total = fmt.Sprintf("%.1f", float64(reqs["all"])/float64(n))
	}
	fmt.Fprintf(tw, "invocation (total)\t%s\t%s\t\t%s\t\n", ms(totals.Percentile(50)), ms(totals.Percentile(99)), total)
	return tw.Flush()
}

// timedBackend times each ledger call by kind.
type timedBackend struct {
	ledger.Backend
	cnt   *counter // nil: requests not counted
	mu    sync.Mutex
	cur   map[string]time.Duration
	calls map[string]int
	reqs  map[string]int64
	start int64 // the counter at reset
}

func (t *timedBackend) requests() int64 {
	if t.cnt == nil {
		return 0
	}
	return t.cnt.n.Load()
}

func (t *timedBackend) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cur, t.calls, t.reqs, t.start = map[string]time.Duration{}, map[string]int{}, map[string]int64{}, t.requests()
}

// snapshot returns the invocation's times, calls and requests by kind
// ("all": every request since reset, this sandbox's and the others').
func (t *timedBackend) snapshot() (map[string]time.Duration, map[string]int, map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reqs["all"] = t.requests() - t.start
	return t.cur, t.calls, t.reqs
}

// time counts a call of kind that began at t0 with the counter at r0.
func (t *timedBackend) time(kind string, t0 time.Time, r0 int64) {
	d := time.Since(t0)
	r := t.requests() - r0
	t.mu.Lock()
	t.cur[kind] += d
	t.calls[kind]++
	t.reqs[kind] += r
	t.mu.Unlock()
}

func (t *timedBackend) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	defer t.time("RecordAndClaim (record)", time.Now(), t.requests())
	return t.Backend.RecordAndClaim(ctx, source, evs, n, lease)
}

func (t *timedBackend) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	defer t.time("Claim (Quiesce)", time.Now(), t.requests())
	return t.Backend.Claim(ctx, n, lease)
}

func (t *timedBackend) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	defer t.time("Renew", time.Now(), t.requests())
	return t.Backend.Renew(ctx, c, lease)
}

func (t *timedBackend) Complete(ctx context.Context, c ledger.Claim, result string) error {
	defer t.time("Complete", time.Now(), t.requests())
	return t.Backend.Complete(ctx, c, result)
}

func (t *timedBackend) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	defer t.time("CompleteBatch", time.Now(), t.requests())
	return t.Backend.CompleteBatch(ctx, cs, results)
}

func (t *timedBackend) Release(ctx context.Context, c ledger.Claim) error {
	defer t.time("Release", time.Now(), t.requests())
	return t.Backend.Release(ctx, c)
}

func (t *timedBackend) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	defer t.time("Fail", time.Now(), t.requests())
	return t.Backend.Fail(ctx, c, cause, retryable)
}

// Flush forwards to the backend's (the object-store ledger's work index).
func (t *timedBackend) Flush(ctx context.Context) error {
	f, ok := t.Backend.(ledger.Flusher)
	if !ok {
		return nil
	}
	defer t.time("Flush", time.Now(), t.requests())
	return f.Flush(ctx)
}

// EveryVersion forwards to the backend's.
func (t *timedBackend) EveryVersion() bool {
	v, ok := t.Backend.(interface{ EveryVersion() bool })
	return ok && v.EveryVersion()
}
