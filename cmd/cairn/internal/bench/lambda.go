package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/sandbox"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/objstore"
)

// LambdaOptions configures Lambda. Zero fields take the defaults.
type LambdaOptions struct {
	// RIE is the Runtime Interface Emulator (sandbox.FindRIE) and Bootstrap
	// the cairn binary the sandboxes run as `cairn lambda`. Required.
	RIE, Bootstrap string
	// Ledgers to measure, by name ("objledger-minio", "postgres", …); each
	// URL is a ledger URL as CAIRN_LEDGER takes it. An s3:// or dynamodb://
	// URL is reached through a counting proxy on loopback (its endpoint=
	// must be an http:// one), so its requests per 1,000 events are
	// counted. Required: at least one.
	Ledgers []LambdaLedger
	// Dir holds the sandboxes' directories. Required.
	Dir string
	// Sandboxes invoked at once (default 4), Invocations per sandbox per
	// round and side (default 50), BatchSize events per SQS batch (default
	// 10), Rounds per side, alternating (default 3).
	Sandboxes, Invocations, BatchSize, Rounds int
	// Progress, if set, is told each phase.
	Progress func(phase string)
}

// LambdaLedger is one ledger Lambda measures.
type LambdaLedger struct {
	Name, URL string
	// Local: the ledger is on this machine's disk (file://): the sandboxes
	// are told it is theirs to share (cairn lambda --local-ledger).
	Local bool
}

// Lambda measures cairn lambda through AWS's Lambda Runtime Interface
// Emulator: Sandboxes sandboxes invoked back to back with SQS batches of
// BatchSize fresh keys (a no-op HTTP handler on loopback), on each ledger,
// against the same function with the ledger bypassed (cairn lambda
// --bench-bypass: the handler called once per event). It reports
// invocations/s, the latency of an invocation (p50, p99; the added latency
// per batch is cairn's minus the bypass's) and, where the ledger is reached
// over HTTP (S3, DynamoDB), its requests per 1,000 events against a
// Powertools-style idempotency guard on the same store (per event a
// conditional put INPROGRESS and a conditional put COMPLETED: no ordering,
// fencing or dead letters).
func Lambda(ctx context.Context, o LambdaOptions) ([]Result, error) {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Sandboxes, 4)
	def(&o.Invocations, 50)
	def(&o.BatchSize, 10)
	def(&o.Rounds, 3)
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.RIE == "" || o.Bootstrap == "" || o.Dir == "" || len(o.Ledgers) == 0 {
		return nil, errors.New("bench lambda: RIE, Bootstrap, Dir and a ledger are required")
	}
	// The no-op handler.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hsrv.Serve(ln) }()
	defer hsrv.Close()
	handlerURL := "http://" + ln.Addr().String() + "/"
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var seq atomic.Int64

	start := func(name string, env []string) ([]*sandbox.Sandbox, error) {
		boxes := make([]*sandbox.Sandbox, o.Sandboxes)
		var g errgroup.Group
		for i := range boxes {
			g.Go(func() error {
				b, err := sandbox.Start(ctx, sandbox.Options{RIE: o.RIE, Bootstrap: o.Bootstrap, Args: []string{"lambda"},
					Dir: filepath.Join(o.Dir, name, strconv.Itoa(i)), Timeout: 30 * time.Second, Name: "cairn-bench",
					Env: append([]string{"CAIRN_HANDLER_HTTP=" + handlerURL}, env...)})
				boxes[i] = b
				return err
			})
		}
		err := g.Wait()
		if err != nil {
			stopAll(boxes)
		}
		return boxes, err
	}
	// side invokes each sandbox n times back to back, all at once, and
	// returns each invocation's latency and the wall time.
	side := func(boxes []*sandbox.Sandbox, n int, tag string) (Latencies, time.Duration, error) {
		var mu sync.Mutex
		var lat Latencies
		var g errgroup.Group
		begin := time.Now()
		for _, b := range boxes {
			g.Go(func() error {
				for range n {
					p := sqsPayload(o.BatchSize, func() event.Event {
						i := seq.Add(1)
						return event.Event{Bucket: "bench", Key: fmt.Sprintf("lambda/%s/%s/%d", run, tag, i), Kind: event.Created,
							Name: "ObjectCreated:Put", ETag: "0123456789abcdef0123456789abcdef", Size: 1, Sequencer: fmt.Sprintf("%016X", i), Time: time.Now().UTC()}
					})
					t0 := time.Now()
					body, status, err := b.Invoke(ctx, p)
					d := time.Since(t0)
					if err != nil {
						return err
					}
					if sandbox.Failed(body, status) || string(body) != `{"batchItemFailures":[]}` {
						return fmt.Errorf("bench lambda (%s): an invocation answered %d %q (the sandbox's output is in %s)", tag, status, body, b.Log())
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
				return nil
			})
		}
		err := g.Wait()
		return lat, time.Since(begin), err
	}

	var results []Result
	for _, led := range o.Ledgers {
		r, err := lambdaLedger(ctx, o, led, start, side)
		if err != nil {
			return results, fmt.Errorf("bench lambda on %s: %w", led.Name, err)
		}
		results = append(results, r...)
	}
	return results, nil
}

func stopAll(boxes []*sandbox.Sandbox) {
	for _, b := range boxes {
		if b != nil {
			b.Stop()
		}
	}
}

// sqsPayload is an SQS batch of n S3 notifications, one event each.
func sqsPayload(n int, next func() event.Event) []byte {
	type record struct {
		MessageID   string `json:"messageId"`
		Body        string `json:"body"`
		EventSource string `json:"eventSource"`
	}
	recs := make([]record, n)
	for i := range recs {
		recs[i] = record{MessageID: strconv.Itoa(i), Body: string(event.S3Body(next())), EventSource: "aws:sqs"}
	}
	data, _ := json.Marshal(map[string]any{"Records": recs})
	return data
}

// counter is a reverse proxy on loopback that counts the requests it
// passes.
type counter struct {
	n atomic.Int64
	// lost: requests answered 412 or 409, conditional writes that lost a
	// race (the writer reads again and retries).
	lost atomic.Int64
	srv  *http.Server
	url  string
}

func newCounter(target string) (*counter, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" {
		return nil, fmt.Errorf("the endpoint %q is no http:// URL the bench can count requests to", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &counter{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	// A client that gave up (a sandbox stopping) is no error of the bench's.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	c.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		// The Host header stays the proxy's: a signed request (SigV4)
		// signed it.
		sw := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(sw, r)
		if sw.status == http.StatusPreconditionFailed || sw.status == http.StatusConflict {
			c.lost.Add(1)
		}
	})}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// through returns raw with its endpoint= pointed at the counter, and the
// original endpoint.
func through(raw string) (endpoint string, rewrite func(proxy string) string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "s3" && u.Scheme != "dynamodb") {
		return "", nil, false
	}
	q := u.Query()
	endpoint = q.Get("endpoint")
	if endpoint == "" {
		return "", nil, false
	}
	return endpoint, func(proxy string) string {
		v := *u
		q := v.Query()
		q.Set("endpoint", proxy)
		v.RawQuery = q.Encode()
		return v.String()
	}, true
}

func lambdaLedger(ctx context.Context, o LambdaOptions, led LambdaLedger,
	start func(string, []string) ([]*sandbox.Sandbox, error),
	side func([]*sandbox.Sandbox, int, string) (Latencies, time.Duration, error)) ([]Result, error) {
	ledgerURL := led.URL
	var cnt *counter
	if endpoint, rewrite, ok := through(led.URL); ok {
		c, err := newCounter(endpoint)
		if err != nil {
			return nil, err
		}
		defer c.srv.Close()
		cnt = c
		ledgerURL = rewrite(c.url)
	}
	env := []string{"CAIRN_LEDGER=" + ledgerURL}
	if led.Local {
		env = append(env, "CAIRN_LOCAL_LEDGER=true")
	}
	o.Progress("starting the sandboxes (" + led.Name + ")")
	cairnBoxes, err := start(led.Name, env)
	if err != nil {
		return nil, err
	}
	defer stopAll(cairnBoxes)
	bypassBoxes, err := start(led.Name+"-bypass", []string{"CAIRN_BENCH_BYPASS=true"})
	if err != nil {
		return nil, err
	}
	defer stopAll(bypassBoxes)
	// Warm up: each sandbox's process starts (and opens the ledger) on its
	// first invoke.
	for _, s := range []struct {
		boxes []*sandbox.Sandbox
		tag   string
	}{{bypassBoxes, "warm-bypass"}, {cairnBoxes, "warm-cairn"}} {
		if _, _, err := side(s.boxes, 2, s.tag); err != nil {
			return nil, err
		}
	}
	var bLat, cLat Latencies
	var bRates, cRates []float64
	var requests, lost int64
	var events int
	for r := range o.Rounds {
		o.Progress(fmt.Sprintf("%s: round %d of %d, bypass", led.Name, r+1, o.Rounds))
		lat, wall, err := side(bypassBoxes, o.Invocations, "bypass")
		if err != nil {
			return nil, err
		}
		bLat = append(bLat, lat...)
		bRates = append(bRates, float64(len(lat))/wall.Seconds())
		o.Progress(fmt.Sprintf("%s: round %d of %d, cairn", led.Name, r+1, o.Rounds))
		var before, lostBefore int64
		if cnt != nil {
			before, lostBefore = cnt.n.Load(), cnt.lost.Load()
		}
		lat, wall, err = side(cairnBoxes, o.Invocations, "cairn")
		if err != nil {
			return nil, err
		}
		if cnt != nil {
			requests += cnt.n.Load() - before
			lost += cnt.lost.Load() - lostBefore
		}
		events += len(lat) * o.BatchSize
		cLat = append(cLat, lat...)
		cRates = append(cRates, float64(len(lat))/wall.Seconds())
	}
	what := fmt.Sprintf("%d sandboxes, SQS batches of %d, no-op HTTP handler", o.Sandboxes, o.BatchSize)
	tp := NewResult(fmt.Sprintf("lambda invocations/s (%s; %s)", led.Name, what), "invocations/s", median(bRates), median(cRates))
	tp.BaselineDesc, tp.CairnDesc = "the same function, ledger bypassed", "cairn lambda on "+led.Name
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50b, p50c, p99b, p99c := bLat.Percentile(50), cLat.Percentile(50), bLat.Percentile(99), cLat.Percentile(99)
	lt := NewResult(fmt.Sprintf("lambda invocation latency p50 (%s; batch of %d)", led.Name, o.BatchSize), "ms", ms(p50b), ms(p50c))
	lt.Lower, lt.BaselineP99, lt.CairnP99 = true, p99b, p99c
	lt.BaselineDesc, lt.CairnDesc = "ledger bypassed", "cairn lambda on "+led.Name
	lt.Note = fmt.Sprintf("added per batch: p50 %.1f ms, p99 %.1f ms (per event: %.2f ms, %.2f ms)",
		ms(p50c-p50b), ms(p99c-p99b), ms(p50c-p50b)/float64(o.BatchSize), ms(p99c-p99b)/float64(o.BatchSize))
	results := []Result{tp, lt}
	if cnt != nil {
		o.Progress(led.Name + ": the Powertools-style baseline")
		base, err := powertoolsRequests(ctx, led.URL, cnt, events)
		if err != nil {
			return nil, err
		}
		rq := NewResult(fmt.Sprintf("lambda ledger requests per 1,000 events (%s)", led.Name), "requests/1000 events", base, float64(requests)*1000/float64(max(events, 1)))
		rq.Lower = true
		rq.BaselineDesc = "Powertools-style guard: conditional put INPROGRESS + conditional put COMPLETED per event, same store"
		rq.CairnDesc = "cairn lambda: record, claim, complete, order, fence, dead-letter"
		rq.Note = fmt.Sprintf("of cairn's, %.0f per 1,000 events were conditional writes that lost a race (412/409) and were retried", float64(lost)*1000/float64(max(events, 1)))
		results = append(results, rq)
	}
	return results, nil
}

// powertoolsRequests runs the Powertools-style idempotency guard for
// min(events, 2000) events on the store of an s3:// ledger URL, through the
// counter, and returns its requests per 1,000 events. For a DynamoDB ledger
// the guard is Powertools' own design (PutItem with attribute_not_exists,
// then UpdateItem): 2 requests per event, by construction.
func powertoolsRequests(ctx context.Context, ledgerURL string, cnt *counter, events int) (float64, error) {
	if u, _ := url.Parse(ledgerURL); u == nil || u.Scheme != "s3" {
		return 2000, nil
	}
	_, rewrite, _ := through(ledgerURL)
	st, err := objstore.Open(ctx, rewrite(cnt.url), nil)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	n := min(max(events, 100), 2000)
	before := cnt.n.Load()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	err = ForEach(ctx, n, 16, func(i int) error {
		key := fmt.Sprintf("cairn-bench-powertools/%s/%d", run, i)
		info, err := st.PutBytes(ctx, key, []byte(`{"status":"INPROGRESS"}`), &objstore.PutOptions{If: objstore.IfAbsent()})
		if err != nil {
			return err
		}
		_, err = st.PutBytes(ctx, key, []byte(`{"status":"COMPLETED"}`), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("the Powertools-style baseline: %w", err)
	}
	return float64(cnt.n.Load()-before) * 1000 / float64(n), nil
}
