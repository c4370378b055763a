package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/sandbox"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
)

// Lambda runs cairn's side of the demo as an AWS Lambda function: Sandboxes
// sandboxes, each AWS's Lambda Runtime Interface Emulator on loopback running
// the cairn binary as its bootstrap (`cairn lambda`, configured by
// environment as Lambda configures a function), all on one shared ledger.
// The deliveries, with the same faults, reach them as SQS batches and as
// direct invocations, a concurrent duplicate going to two sandboxes at once;
// what a sandbox answers failed (a batch's batchItemFailures, a timeout, an
// error) is delivered again, as SQS and Lambda's asynchronous invocation do.
// One more sandbox serves the scheduled drain (DrainPayload, every second:
// retries, work whose key was busy, the audit's resubmissions); before the
// deliveries it is sent the first event that a newer one of its key
// supersedes, and frozen in the middle of that handler, as a handler that
// ignores its deadline holds its sandbox, so Lambda's timeout kills it
// mid-run: its claim's lease runs out, the key is taken over with a higher
// fencing token, and the frozen handler's writes, landing after its
// successor's, must be refused.
//
// cairn's handler is the demo's own, served over HTTP on loopback to the
// sandboxes (CAIRN_HANDLER_HTTP): the same serving table and fenced effects
// as the daemon's.
type Lambda struct {
	// RIE is the emulator binary (sandbox.FindRIE). Required.
	RIE string
	// Bootstrap is the cairn binary the sandboxes run as `cairn lambda`.
	// Required.
	Bootstrap string
	// LedgerURL is Options.Ledger's URL, which the sandboxes open
	// (CAIRN_LEDGER). Required.
	LedgerURL string
	// Sandboxes that receive deliveries. Default 4 (plus the scheduled
	// drain's).
	Sandboxes int
	// Timeout is the function's timeout, whole seconds. Default 5s.
	Timeout time.Duration
	// BatchSize is the most messages an SQS batch carries. Default 10.
	BatchSize int
	// Env adds variables to the function's environment.
	Env []string
}

// LambdaReport says how cairn's side ran as a Lambda function.
type LambdaReport struct {
	Sandboxes   int `json:"sandboxes"`
	Invocations int `json:"invocations"`
	SQSBatches  int `json:"sqs_batches"`
	Direct      int `json:"direct_invocations"`
	Drains      int `json:"scheduled_drains"`
	// TimedOut: invocations Lambda's timeout killed mid-handler.
	TimedOut int `json:"timed_out"`
	// Redelivered: messages delivered again because their invocation's
	// answer said they were not recorded (or it failed as a whole).
	Redelivered int `json:"redelivered"`
	// Logs is where each sandbox's output is.
	Logs string `json:"logs"`
}

const (
	lambdaDrainEvery = time.Second
	maxDeliveries    = 10 // attempts at one message before the demo gives up
)

// invocation is one invoke the senders make.
type invocation struct {
	evs      []event.Event
	sqs      bool
	attempts int
}

func (v *invocation) payload() []byte {
	if !v.sqs {
		return event.S3Body(v.evs...)
	}
	type record struct {
		MessageID   string            `json:"messageId"`
		Body        string            `json:"body"`
		Attributes  map[string]string `json:"attributes"`
		EventSource string            `json:"eventSource"`
		ARN         string            `json:"eventSourceARN"`
	}
	var recs []record
	for i, ev := range v.evs {
		recs = append(recs, record{MessageID: strconv.Itoa(i), Body: string(event.S3Body(ev)),
			Attributes:  map[string]string{"ApproximateReceiveCount": strconv.Itoa(v.attempts + 1)},
			EventSource: "aws:sqs", ARN: "arn:aws:sqs:us-east-1:012345678912:cairn-demo"})
	}
	data, _ := json.Marshal(map[string]any{"Records": recs})
	return data
}

// plan deals the deliveries into invocations, round by round, one
// invocation per sandbox a round, a delivery to each in turn: consecutive
// deliveries (a concurrent duplicate is next to its first) go to different
// sandboxes at about the same time. One slot in five is a direct
// invocation of one event, the rest SQS batches.
func lambdaPlan(order []event.Event, sandboxes, batch int) []*invocation {
	var out []*invocation
	for len(order) > 0 {
		round := make([]*invocation, sandboxes)
		room := make([]int, sandboxes)
		for i := range round {
			round[i] = &invocation{sqs: (len(out)+i)%5 != 4}
			room[i] = batch
			if !round[i].sqs {
				room[i] = 1
			}
		}
		for i := 0; len(order) > 0; i++ {
			open := false
			for j := range round {
				if room[j] > 0 {
					open = true
				}
			}
			if !open {
				break
			}
			j := i % sandboxes
			if room[j] == 0 {
				continue
			}
			round[j].evs = append(round[j].evs, order[0])
			order = order[1:]
			room[j]--
		}
		for _, v := range round {
			if len(v.evs) > 0 {
				out = append(out, v)
			}
		}
	}
	return out
}

// runLambda is runCairn with cairn as a Lambda function (see Lambda).
func runLambda(ctx context.Context, o Options, order []event.Event, delivered map[string]event.Event, tables *tables, t *tracker, sink *sink, rep *LambdaReport) (int, error) {
	lo := *o.Lambda
	if lo.RIE == "" || lo.Bootstrap == "" || lo.LedgerURL == "" {
		return 0, errors.New("demo: Lambda needs RIE, Bootstrap and LedgerURL")
	}
	if lo.Sandboxes <= 0 {
		lo.Sandboxes = 4
	}
	if lo.Timeout == 0 {
		lo.Timeout = 5 * time.Second
	}
	if lo.BatchSize <= 0 {
		lo.BatchSize = 10
	}
	rep.Sandboxes = lo.Sandboxes + 1
	rep.Logs = filepath.Join(o.Dir, "sandboxes")
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fail := func(err error) { cancel(err) }
	failed := func() error {
		if context.Cause(ctx) != nil && context.Cause(ctx) != ctx.Err() {
			return context.Cause(ctx)
		}
		return ctx.Err()
	}

	// The doomed event: the first delivery a newer event of its key
	// supersedes. Delivered first, alone, to the drain's sandbox.
	doomedAt := -1
	for i, ev := range order {
		if event.CompareSequencer(ev.Sequencer, delivered[ev.Key].Sequencer) < 0 {
			doomedAt = i
			break
		}
	}
	var doomed event.Event
	if doomedAt >= 0 {
		doomed = order[doomedAt]
		order = append(order[:doomedAt:doomedAt], order[doomedAt+1:]...)
	}

	// cairn's handler, over HTTP: /handle/N for sandbox N.
	var boxes []*sandbox.Sandbox
	drainBox := lo.Sandboxes // its index
	var stuck atomic.Bool
	stalled := make(chan struct{})    // the doomed handler froze its sandbox
	lateQueued := make(chan struct{}) // its writes wait for release
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	var late sync.WaitGroup
	defer late.Wait()
	defer releaseOnce()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /handle/{box}", func(w http.ResponseWriter, r *http.Request) {
		box, _ := strconv.Atoi(r.PathValue("box"))
		var pl intake.Payload
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&pl); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			fail(fmt.Errorf("demo: a sandbox posted a payload the handler cannot read: %w", err))
			return
		}
		wk := intake.Work{Event: pl.Event, Token: pl.Token, Attempt: pl.Attempt, Source: pl.Source}
		t.enter(wk.Event)
		if wk.Attempt > 1 {
			t.retry()
		}
		if box == drainBox && doomedAt >= 0 && wk.Event.Key == doomed.Key && stuck.CompareAndSwap(false, true) {
			// Mid-handler: the sandbox freezes, as a handler that ignores
			// its deadline holds it, until Lambda's timeout kills it.
			if err := boxes[box].Freeze(); err != nil {
				fail(fmt.Errorf("demo: freezing the sandbox mid-handler: %w", err))
			}
			close(stalled)
			<-r.Context().Done() // killed: its connection is gone
			late.Go(func() {
				<-release
				if err := materialise(context.WithoutCancel(ctx), tables, sink, wk); err != nil {
					fail(fmt.Errorf("demo: the killed handler's late write failed: %w", err))
				}
			})
			close(lateQueued)
			return
		}
		if err := materialise(r.Context(), tables, sink, wk); err != nil {
			if r.Context().Err() == nil {
				fail(fmt.Errorf("demo: cairn's handler failed writing serving_cairn or its effect: %w", err))
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("demo: listening for the handler's requests on a loopback port: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// The sandboxes.
	o.Progress("lambda (sandboxes)", 0, lo.Sandboxes+1)
	boxes = make([]*sandbox.Sandbox, lo.Sandboxes+1)
	var startErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range boxes {
		wg.Go(func() {
			env := append([]string{"CAIRN_LEDGER=" + lo.LedgerURL, "CAIRN_LOCAL_LEDGER=true",
				fmt.Sprintf("CAIRN_HANDLER_HTTP=http://%s/handle/%d", ln.Addr(), i),
				"CAIRN_CONCURRENCY=" + strconv.Itoa(o.Concurrency)}, lo.Env...)
			b, err := sandbox.Start(ctx, sandbox.Options{RIE: lo.RIE, Bootstrap: lo.Bootstrap, Args: []string{"lambda"},
				Dir: filepath.Join(rep.Logs, strconv.Itoa(i)), Env: env, Timeout: lo.Timeout, Name: "cairn-demo"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				startErr = errors.Join(startErr, err)
				return
			}
			boxes[i] = b
		})
	}
	wg.Wait()
	defer func() {
		for _, b := range boxes {
			if b != nil {
				b.Stop()
			}
		}
	}()
	if startErr != nil {
		return 0, fmt.Errorf("demo: %w", startErr)
	}

	// The invocations and their answers.
	var counts sync.Mutex
	invoke := func(b *sandbox.Sandbox, v *invocation) (again *invocation, err error) {
		body, status, err := b.Invoke(ctx, v.payload())
		if err != nil {
			return nil, err
		}
		counts.Lock()
		defer counts.Unlock()
		rep.Invocations++
		if v.sqs {
			rep.SQSBatches++
		} else {
			rep.Direct++
		}
		if sandbox.TimedOut(body) {
			rep.TimedOut++
		}
		var redo []event.Event
		switch {
		case sandbox.Failed(body, status):
			redo = v.evs // the whole payload again
		case v.sqs:
			var ans struct {
				Failures []struct {
					ID string `json:"itemIdentifier"`
				} `json:"batchItemFailures"`
			}
			if err := json.Unmarshal(body, &ans); err != nil {
				return nil, fmt.Errorf("demo: a sandbox answered an SQS batch with %q: %w", body, err)
			}
			for _, f := range ans.Failures {
				i, err := strconv.Atoi(f.ID)
				if err != nil || i < 0 || i >= len(v.evs) {
					return nil, fmt.Errorf("demo: a sandbox's batchItemFailures names message %q, which the batch did not carry", f.ID)
				}
				redo = append(redo, v.evs[i])
			}
		}
		if len(redo) == 0 {
			return nil, nil
		}
		if v.attempts+1 >= maxDeliveries {
			return nil, fmt.Errorf("demo: %d message(s) still not recorded after %d deliveries; the last answer was %d %q (the sandboxes' output is under %s)",
				len(redo), maxDeliveries, status, body, rep.Logs)
		}
		rep.Redelivered += len(redo)
		return &invocation{evs: redo, sqs: v.sqs, attempts: v.attempts + 1}, nil
	}

	// The doomed delivery first: it freezes its sandbox mid-handler.
	doomedDone := make(chan *invocation, 1)
	if doomedAt >= 0 {
		o.Progress("lambda (timeout kill)", 0, 1)
		go func() {
			again, err := invoke(boxes[drainBox], &invocation{evs: []event.Event{doomed}})
			if err != nil {
				fail(err)
			}
			doomedDone <- again
		}()
		select {
		case <-stalled:
		case <-doomedDone:
			return 0, errors.Join(failed(), errors.New("demo: the sandbox meant to be killed mid-handler answered before its handler ran"))
		case <-ctx.Done():
			return 0, failed()
		}
	} else {
		close(doomedDone)
	}

	// The scheduled drain, every second, in the drain's sandbox once its
	// doomed invocation has been answered.
	drainCtx, stopDrains := context.WithCancel(ctx)
	drains := make(chan struct{})
	var pending []*invocation // the doomed event again, after its timeout
	go func() {
		defer close(drains)
		if again := <-doomedDone; again != nil {
			counts.Lock()
			pending = append(pending, again)
			counts.Unlock()
		}
		for drainCtx.Err() == nil {
			body, status, err := boxes[drainBox].Invoke(drainCtx, []byte(`{"cairn":"drain"}`))
			if drainCtx.Err() != nil {
				return
			}
			if err != nil || sandbox.Failed(body, status) {
				fail(fmt.Errorf("demo: a scheduled drain failed: %v %d %q (the sandboxes' output is under %s)", err, status, body, rep.Logs))
				return
			}
			counts.Lock()
			rep.Drains++
			counts.Unlock()
			select {
			case <-drainCtx.Done():
			case <-time.After(lambdaDrainEvery):
			}
		}
	}()
	defer func() { stopDrains(); <-drains }()

	// The deliveries, from one sender per sandbox; what comes back failed
	// is queued again.
	invs := lambdaPlan(order, lo.Sandboxes, lo.BatchSize)
	queue := make(chan *invocation, len(invs)*maxDeliveries+8)
	var outstanding sync.WaitGroup
	outstanding.Add(len(invs))
	for _, v := range invs {
		queue <- v
	}
	go func() { outstanding.Wait(); close(queue) }()
	var sent atomic.Int64
	var senders sync.WaitGroup
	for i := range lo.Sandboxes {
		senders.Go(func() {
			for v := range queue {
				if ctx.Err() != nil {
					outstanding.Done()
					continue
				}
				again, err := invoke(boxes[i], v)
				if err != nil {
					fail(err)
				} else if again != nil {
					outstanding.Add(1)
					queue <- again
				}
				o.Progress("cairn (lambda)", int(sent.Add(int64(len(v.evs)))), len(order))
				outstanding.Done()
			}
		})
	}
	senders.Wait()
	if err := failed(); err != nil {
		return 0, err
	}
	// The doomed event's redelivery, once its invocation timed out (Lambda
	// retries a failed asynchronous invocation).
	if doomedAt >= 0 {
		select {
		case <-lateQueued:
		case <-ctx.Done():
			return 0, failed()
		case <-time.After(lo.Timeout + time.Minute):
			return 0, errors.New("demo: the frozen sandbox was never killed by its timeout")
		}
	}
	for {
		counts.Lock()
		v := pending
		pending = nil
		counts.Unlock()
		if len(v) == 0 {
			break
		}
		for _, x := range v {
			again, err := invoke(boxes[0], x)
			if err != nil {
				return 0, err
			}
			if again != nil {
				counts.Lock()
				pending = append(pending, again)
				counts.Unlock()
			}
		}
	}
	if err := drain(ctx, o, len(order), failed); err != nil {
		return 0, err
	}
	releaseOnce() // the killed handler's writes land, after its successor's
	late.Wait()
	if err := failed(); err != nil {
		return 0, err
	}
	// The audit, as in the daemon's demo; the scheduled drain runs what it
	// resubmits.
	o.Progress("cairn (audit)", 0, 1)
	ar, err := audit.Run(ctx, o.Store, o.Ledger, o.Bucket, &audit.Options{Grace: time.Nanosecond})
	if err != nil {
		return 0, fmt.Errorf("demo: cairn's audit of the bucket failed: %w", err)
	}
	if err := drain(ctx, o, len(order), failed); err != nil {
		return 0, err
	}
	return ar.Resubmitted, nil
}
