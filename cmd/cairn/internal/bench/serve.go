package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

// ServeOptions configures Serve. Zero fields take the defaults.
type ServeOptions struct {
	// Events is how many events the no-op handler run posts (default 50000).
	Events int
	// ExecEvents is how many the exec handler run posts (0 skips that run;
	// `cairn bench serve` defaults it to 3000).
	ExecEvents int
	// Senders is concurrent webhook senders (default 64).
	Senders int
	// Concurrency is handlers at once (default 64).
	Concurrency int
	// LedgerURL is the ledger (default: a fresh SQLite file per run); it is
	// not wiped: one holding work to do is refused.
	LedgerURL string
	// Only, if "noop" or "exec", runs that handler only.
	Only string
	// SkipBaseline runs cairn only (for profiling).
	SkipBaseline bool
	// Rounds is how many times each side runs, alternating, baseline first
	// (default 3): events/s is the median round's, latencies are over every
	// round's events. A machine that slows for a while (shared hosts do)
	// then moves one round of each side, not the figure.
	Rounds int
}

// Serve posts MinIO-style webhook bodies (one record per POST, distinct
// keys) from Senders concurrent senders to a real HTTP server on 127.0.0.1,
// and measures sustained events/s from the first POST to the last handler
// call, and the delivery-to-handler latency, with a no-op Go handler and with
// an exec handler running /bin/true. cairn records each event in the ledger
// before answering and workers claim, handle and complete; the baseline is
// the same server and handler with the ledger bypassed. With the no-op
// handler a third side runs in each round: the pipeline on memLedger, which
// decides in memory and keeps nothing (Result.PipelineCeiling), so the figure shows
// how much of the gap to the baseline is the ledger's and how much the
// pipeline's.
func Serve(ctx context.Context, opts ServeOptions) ([]Result, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opts.Events, 50000)
	def(&opts.Senders, 64)
	def(&opts.Concurrency, 64)
	def(&opts.Rounds, 3)
	if opts.Rounds < 1 || opts.Events < 1 {
		return nil, fmt.Errorf("bench: Events and Rounds must be at least 1 (or 0 for the defaults)")
	}
	tmp, err := os.MkdirTemp("", "cairn-bench-serve-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var results []Result
	for _, kind := range []string{"noop", "exec"} {
		if opts.Only != "" && opts.Only != kind {
			continue
		}
		n := opts.Events
		var h intake.Handler = intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil })
		if kind == "exec" {
			n = opts.ExecEvents
			h = &intake.ExecHandler{Argv: []string{"/bin/true"}}
		}
		if n <= 0 {
			continue
		}
		url := opts.LedgerURL
		if url == "" {
			url = filepath.Join(tmp, kind+".db")
		}
		l, err := ledger.Open(ctx, url, nil)
		if err != nil {
			return nil, err
		}
		var base, ceiling, withLedger serveRounds
		// The pipeline's own ceiling, for the no-op handler: the same
		// pipeline on a ledger that decides in memory and keeps nothing.
		mem := kind == "noop" && !opts.SkipBaseline
		for range opts.Rounds {
			if !opts.SkipBaseline {
				b, err := runServeBench(ctx, nil, h, n, opts.Senders, opts.Concurrency)
				if err != nil {
					l.Close()
					return nil, fmt.Errorf("baseline: %w", err)
				}
				base.add(b)
			}
			if mem {
				c, err := runServeBench(ctx, ledger.New(newMemLedger()), h, n, opts.Senders, opts.Concurrency)
				if err != nil {
					l.Close()
					return nil, fmt.Errorf("pipeline ceiling: %w", err)
				}
				ceiling.add(c)
			}
			c, err := runServeBench(ctx, l, h, n, opts.Senders, opts.Concurrency)
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("cairn: %w", err)
			}
			withLedger.add(c)
		}
		l.Close()
		r := NewResult(fmt.Sprintf("webhook → handler (%s handler), %d events, %d senders, median of %d rounds", kind, n, opts.Senders, opts.Rounds),
			"events/s", median(base.perSec), median(withLedger.perSec))
		r.BaselineDesc = "ledger bypassed: handler inside the request"
		r.CairnDesc = "recorded durably in the ledger, claimed, handled, completed"
		r.BaselineP99, r.CairnP99 = base.lat.Percentile(99), withLedger.lat.Percentile(99)
		r.Note = fmt.Sprintf("p50 delivery-to-handler: baseline %s, cairn %s; events/s by round: baseline %s, cairn %s",
			base.lat.Percentile(50).Round(time.Microsecond), withLedger.lat.Percentile(50).Round(time.Microsecond), joinRates(base.perSec), joinRates(withLedger.perSec))
		if mem {
			r.PipelineCeiling, r.PipelineCeilingP99 = median(ceiling.perSec), ceiling.lat.Percentile(99)
			r.PipelineCeilingDesc = fmt.Sprintf("the same pipeline on a ledger that decides in memory and keeps nothing; by round %s", joinRates(ceiling.perSec))
		}
		results = append(results, r)
	}
	return results, nil
}

type serveBenchResult struct {
	perSec float64
	lat    Latencies // delivery to handler, each event's
}

// serveRounds gathers the rounds of one side.
type serveRounds struct {
	perSec []float64
	lat    Latencies
}

func (s *serveRounds) add(r serveBenchResult) {
	s.perSec = append(s.perSec, r.perSec)
	s.lat = append(s.lat, r.lat...)
}

// runServeBench posts n single-record MinIO bodies and waits until the
// handler has been called for each. l nil bypasses the ledger.
func runServeBench(ctx context.Context, l *ledger.Ledger, h intake.Handler, n, senders, concurrency int) (serveBenchResult, error) {
	runtime.GC()                    // start each side from the same heap
	sent := make([]atomic.Int64, n) // unix nanos at send, by key index
	lat := make(Latencies, n)
	var handled atomic.Int64
	all := make(chan struct{})
	var lastAt atomic.Int64
	seen := make([]atomic.Bool, n)
	record := func(ev event.Event) {
		var i int
		if _, err := fmt.Sscanf(ev.Key, "bench/%d", &i); err != nil || i < 0 || i >= n || seen[i].Swap(true) {
			return // not this run's event, or a second run of one (at least once): the first counts
		}
		lat[i] = time.Duration(time.Now().UnixNano() - sent[i].Load())
		lastAt.Store(time.Now().UnixNano())
		if handled.Add(1) == int64(n) {
			close(all)
		}
	}
	wrapped := intake.HandlerFunc(func(ctx context.Context, w intake.Work) (string, error) {
		res, err := h.Handle(ctx, w)
		if err == nil {
			record(w.Event)
		}
		return res, err
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return serveBenchResult{}, err
	}
	var srvHandler http.Handler
	var stop func() error
	if l == nil {
		// The baseline: parse and run the handler inside the request.
		srvHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			evs, err := event.Parse(body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			for _, ev := range evs {
				if _, err := wrapped.Handle(r.Context(), intake.Work{Event: ev, Attempt: 1}); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
			}
			w.WriteHeader(200)
		})
		stop = func() error { return nil }
	} else {
		// Work already in the ledger would be claimed and handled too (a
		// scratch ledger another bench filled): refuse rather than time it.
		counts, err := l.Counts(ctx)
		if err != nil {
			return serveBenchResult{}, err
		}
		if work := counts[ledger.Pending] + counts[ledger.Claimed] + counts[ledger.Failed]; work > 0 {
			return serveBenchResult{}, fmt.Errorf("the ledger already holds %d records with work to do: bench serve needs one without", work)
		}
		p, err := intake.New(l, wrapped, &intake.Options{Concurrency: concurrency, Poll: 100 * time.Millisecond})
		if err != nil {
			return serveBenchResult{}, err
		}
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(pctx) }()
		srvHandler = p.Webhook(intake.WebhookOptions{})
		stop = func() error { cancel(); return <-done }
	}
	srv := &http.Server{Handler: srvHandler}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/v1/events"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders}}
	defer client.CloseIdleConnections()
	// A bucket of this run's own: events of an earlier run on the same ledger
	// would make these duplicates, never handled.
	bucket := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = minioBody(event.Event{Bucket: bucket, Key: fmt.Sprintf("bench/%d", i), ETag: "0123456789abcdef", Size: 1024,
			Sequencer: fmt.Sprintf("%016X", i+1), Kind: event.Created, Name: "ObjectCreated:Put"})
	}
	start := time.Now()
	firstErr := ForEach(ctx, n, senders, func(i int) error {
		sent[i].Store(time.Now().UnixNano())
		resp, err := client.Post(url, "application/json", bytes.NewReader(bodies[i]))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("webhook answered %s", resp.Status)
		}
		return nil
	})
	if firstErr == nil {
		select {
		case <-all:
		case <-time.After(5 * time.Minute):
			firstErr = fmt.Errorf("only %d of %d events handled after 5 minutes", handled.Load(), n)
		case <-ctx.Done():
			firstErr = ctx.Err()
		}
	}
	if err := stop(); firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return serveBenchResult{}, firstErr
	}
	elapsed := time.Duration(lastAt.Load() - start.UnixNano())
	return serveBenchResult{perSec: float64(n) / elapsed.Seconds(), lat: lat}, nil
}

// minioBody is the body MinIO's webhook target posts for one event.
func minioBody(ev event.Event) []byte {
	var records struct {
		Records []json.RawMessage
	}
	_ = json.Unmarshal(event.S3Body(ev), &records)
	b, _ := json.Marshal(map[string]any{"EventName": "s3:" + ev.Name, "Key": ev.Bucket + "/" + ev.Key, "Records": records.Records})
	return b
}
