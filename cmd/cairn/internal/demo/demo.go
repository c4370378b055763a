// Package demo is `cairn demo`: the whole intake pipeline on one machine, fed
// with the delivery faults real S3 notifications have, next to a naive
// consumer fed the same deliveries.
//
// Writes go to a real store (a local directory by default). Each write's
// S3-format notification is delivered with seed 001's faults, scaled up to be
// visible: duplicates (up to 3 copies; some concurrent, some late), overwrites
// of a key delivered out of order, and lost events. The naive consumer runs its
// handler once per delivery; cairn receives the same deliveries over real HTTP
// at its webhook, decides through the ledger and runs the same handler per
// claim. Both handlers materialise objects into a serving table in SQLite; the
// cairn one commits conditionally on the fencing token, as every handler should.
//
// The report counts, for each: objects processed twice for the same change,
// stale overwrites (an older version applied after a newer one) and objects
// whose serving row differs from the bucket at the end. The naive consumer
// misses the objects whose newest event was lost; cairn then audits the bucket
// (package audit: LIST against the ledger), which finds and resubmits them,
// so any difference left in cairn's table breaks an invariant.
//
// cairn's handler also writes an effect per key into a sink (a second store)
// through package fence, with its claim's fencing token: an object that says
// which change of the key it applies. With Crash, the daemon is killed once
// while a handler is stuck before its write: its ledger connection dies as a
// kill -9 would leave it (nothing released, settled or renewed), a new daemon
// takes the work over once the claim's lease has expired, with a higher
// token, and the stuck handler's write lands after its successor's, as a
// paused, partitioned or orphaned worker's would. At the end the demo reads the sink back: every key's effect
// must be the bucket's final state, written once; the late write must have
// been refused.
package demo

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// Options configure a run.
type Options struct {
	Store  *objstore.Store // required: where objects are written
	Bucket string          // the bucket name events carry
	Ledger *ledger.Ledger  // required
	Dir    string          // required: where the serving tables live
	// Sink is where cairn's handler writes each key's effect, fenced. It
	// must enforce conditional writes. Default: a local directory under Dir.
	Sink *objstore.Store
	// Crash kills cairn's daemon once while one of its handlers is stuck
	// before writing its effect (a change some newer delivery supersedes):
	// its ledger calls fail from then on, so its claims are left to expire,
	// as after kill -9. Another daemon takes the work over after the lease;
	// the stuck handler writes after its successor has, with its old fencing
	// token, and the sink must refuse it.
	Crash bool
	// Writes, Keys: how many writes over how many keys. Defaults 2000, 400.
	Writes, Keys int
	// Senders deliver concurrently (naive handlers run as concurrently).
	// Default 16.
	Senders int
	// Concurrency of cairn's handlers. Default 16.
	Concurrency int
	// Fault rates. Defaults: Dup 0.06 (a sixth of them with 3 copies), Reorder
	// 0.2 of a key's consecutive overwrites, Lost 0.01.
	Dup, Reorder, Lost float64
	Seed               uint64
	Logger             *slog.Logger
	// Progress, if set, is told each phase and its progress.
	Progress func(phase string, done, total int)
	// Lambda, if set, runs cairn's side as an AWS Lambda function instead
	// of a daemon (lambda.go); Crash is then not used.
	Lambda *Lambda
}

// Side is one consumer's results.
type Side struct {
	HandlerRuns     int `json:"handler_runs"`
	DoubleProcessed int `json:"double_processed"`
	StaleOverwrites int `json:"stale_overwrites"`
	// Wrong: objects whose serving row differs from the bucket at the end,
	// excluding AwaitingAudit.
	Wrong int `json:"wrong_at_end"`
	// AwaitingAudit: objects whose newest event was lost (only a LIST finds
	// them); for cairn, after its audit, always 0.
	AwaitingAudit int `json:"awaiting_audit"`
	// FoundByAudit: changes cairn's audit found and resubmitted.
	FoundByAudit int `json:"found_by_audit,omitempty"`
	// Retried: cairn's handler runs that were not their work's first
	// attempt. The demo's handler never fails, so each is a claim whose lease
	// ran out before its outcome was recorded: 0 unless Options.Crash.
	Retried   int      `json:"retried,omitempty"`
	WrongKeys []string `json:"wrong_keys,omitempty"`
	Seconds   float64  `json:"seconds"`
}

// Report is a run's outcome.
type Report struct {
	Writes     int `json:"writes"`
	Keys       int `json:"keys"`
	Deletes    int `json:"deletes"`
	Deliveries int `json:"deliveries"`
	Duplicates int `json:"duplicates"`
	Concurrent int `json:"duplicates_concurrent"`
	Late       int `json:"duplicates_late"`
	Reordered  int `json:"overwrites_reordered"`
	Lost       int `json:"events_lost"`
	// NewestLost: keys whose newest event was lost. Of them, LostNoChange
	// needed nothing (the lost event left the object as the newest delivered
	// one had announced it, as a delete after a delete does: the ledger
	// already agrees with the bucket, and the audit finds nothing), and
	// NaiveRightByChance the naive consumer serves right all the same (an
	// out-of-order delivery happened to leave the row as the bucket is). So
	// Naive.AwaitingAudit = NewestLost - NaiveRightByChance, and (when the
	// invariants hold) Cairn.FoundByAudit = NewestLost - LostNoChange.
	NewestLost         int  `json:"keys_newest_lost"`
	LostNoChange       int  `json:"newest_lost_no_change"`
	NaiveRightByChance int  `json:"naive_right_by_chance"`
	Naive              Side `json:"naive"`
	Cairn              Side `json:"cairn"`
	// Effects is what cairn's sink holds at the end, read back.
	Effects     Effects `json:"effects"`
	InvariantOK bool    `json:"invariants_hold"`
	// Lambda: how cairn's side ran as a Lambda function (Options.Lambda).
	Lambda *LambdaReport `json:"lambda,omitempty"`
}

// Effects judges the sink cairn's handler writes, as read back at the end.
type Effects struct {
	// ExactlyOnce: keys whose effect is the bucket's final state (a removal
	// for a deleted key), written once.
	ExactlyOnce int `json:"exactly_once"`
	// Double: keys whose effect was written more than once for the same
	// change.
	Double int `json:"double"`
	// Wrong: keys whose effect is not the bucket's final state (or is
	// missing), as a stale write landing late leaves it.
	Wrong     int      `json:"wrong"`
	WrongKeys []string `json:"wrong_keys,omitempty"`
	// StaleRefused: writes the sink refused (fence.ErrStale) because a newer
	// holder had written. A refusal leaves nothing in the sink, so this one
	// is the handler's count.
	StaleRefused int `json:"stale_refused"`
}

// Broken names each of cairn's invariants the run broke, with how often
// (none if InvariantOK); the keys served wrong are in Cairn.WrongKeys.
func (r Report) Broken() []string {
	var out []string
	if n := r.Cairn.DoubleProcessed; n > 0 {
		out = append(out, fmt.Sprintf("every change processed once (%d extra handler runs for changes already processed)", n))
	}
	if n := r.Cairn.StaleOverwrites; n > 0 {
		out = append(out, fmt.Sprintf("no stale overwrites (%d times an older state was applied after a newer one)", n))
	}
	if n := r.Cairn.Wrong; n > 0 {
		out = append(out, fmt.Sprintf("every object served as the bucket has it at the end (%d served wrong)", n))
	}
	if n := r.Effects.Double; n > 0 {
		out = append(out, fmt.Sprintf("every effect written once (%d written more than once)", n))
	}
	if n := r.Effects.Wrong; n > 0 {
		out = append(out, fmt.Sprintf("every effect the bucket's final state (%d wrong or missing in the sink)", n))
	}
	return out
}

func (o *Options) defaults() {
	if o.Writes <= 0 {
		o.Writes = 2000
	}
	if o.Keys <= 0 {
		o.Keys = 400
	}
	if o.Senders <= 0 {
		o.Senders = 16
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Dup == 0 {
		o.Dup = 0.06
	}
	if o.Reorder == 0 {
		o.Reorder = 0.2
	}
	if o.Lost == 0 {
		o.Lost = 0.01
	}
	if o.Bucket == "" {
		o.Bucket = "demo"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = func(string, int, int) {}
	}
}

// keyNames are the demo's keys: the awkward kinds real buckets have.
func keyName(i int) string {
	shapes := []string{"data/obj-%04d.json", "reports/2026/q%d summary.csv", "images/ünï cødé 日本 %d.png", "a+b=c/%d+1.txt",
		"100%%/%d%%20literal.bin", "deep/a/b/c/d/e/f/%d", "two  spaces %d .txt"}
	return fmt.Sprintf(shapes[i%len(shapes)], i)
}

// Run runs the demo.
func Run(ctx context.Context, o Options) (Report, error) {
	o.defaults()
	if o.Store == nil || o.Ledger == nil || o.Dir == "" {
		return Report{}, errors.New("demo: Store, Ledger and Dir are required")
	}
	if o.Sink == nil {
		sink, err := fsstore.Open(filepath.Join(o.Dir, "effects"), &fsstore.Options{NoSync: true})
		if err != nil {
			return Report{}, fmt.Errorf("demo: the effects sink: %w", err)
		}
		defer sink.Close()
		o.Sink = sink
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0xca1e))
	rep := Report{Writes: o.Writes, Keys: o.Keys}

	// 1. Writes: per key in order (sequencers grow per key), keys in parallel.
	evs, deletes, err := write(ctx, o, rng)
	if err != nil {
		return rep, err
	}
	rep.Deletes = deletes

	// 2. The delivery plan, with faults.
	plan := planDeliveries(evs, o, rng, &rep)
	rep.Deliveries = len(plan.order)

	tables, err := openTables(filepath.Join(o.Dir, "serving.db"))
	if err != nil {
		return rep, err
	}
	defer tables.db.Close()

	// 3. The naive consumer: the handler once per delivery.
	naive := newTracker()
	start := time.Now()
	err = deliver(ctx, plan.order, o.Senders, func(i int, ev event.Event) error {
		naive.enter(ev)
		return tables.apply(ctx, "serving_naive", ev, 0)
	}, func(n int) { o.Progress("naive consumer", n, len(plan.order)) })
	if err != nil {
		return rep, fmt.Errorf("demo: the naive consumer's serving table failed: %w", err)
	}
	rep.Naive.Seconds = time.Since(start).Seconds()

	// What the audit can find: a key whose newest event was lost differs in
	// the ledger from the bucket unless the newest delivered event already
	// announced the object's final state.
	delivered := map[string]event.Event{}
	for _, ev := range plan.order {
		if d, ok := delivered[ev.Key]; !ok || event.CompareSequencer(ev.Sequencer, d.Sequencer) > 0 {
			delivered[ev.Key] = ev
		}
	}

	// 4. cairn: the same deliveries over HTTP to the webhook.
	cairn := newTracker()
	start = time.Now()
	sink := &sink{store: o.Sink}
	var found int
	if o.Lambda != nil {
		rep.Lambda = &LambdaReport{}
		found, err = runLambda(ctx, o, plan.order, delivered, tables, cairn, sink, rep.Lambda)
	} else {
		found, err = runCairn(ctx, o, plan.order, delivered, tables, cairn, sink)
	}
	if err != nil {
		return rep, err
	}
	rep.Cairn.FoundByAudit = found
	cairn.mu.Lock()
	rep.Cairn.Retried = cairn.retried
	cairn.mu.Unlock()
	rep.Cairn.Seconds = time.Since(start).Seconds()

	// 5. Judge both tables against the bucket.
	final, err := bucketState(ctx, o)
	if err != nil {
		return rep, fmt.Errorf("demo: reading the bucket's final state failed: %w", err)
	}
	for k := range plan.newestLost {
		rep.NewestLost++
		if stateOf(delivered[k]) == final[k] {
			rep.LostNoChange++
		}
	}
	for _, s := range []struct {
		table string
		t     *tracker
		side  *Side
	}{{"serving_naive", naive, &rep.Naive}, {"serving_cairn", cairn, &rep.Cairn}} {
		rows, err := tables.rows(ctx, s.table)
		if err != nil {
			return rep, fmt.Errorf("demo: reading %s failed: %w", s.table, err)
		}
		s.side.HandlerRuns, s.side.DoubleProcessed, s.side.StaleOverwrites = s.t.counts()
		for i := range o.Keys {
			k := keyName(i)
			if rows[k] == final[k] {
				if plan.newestLost[k] && s.side == &rep.Naive {
					rep.NaiveRightByChance++
				}
				continue
			}
			if plan.newestLost[k] && s.side == &rep.Naive {
				s.side.AwaitingAudit++ // cairn audited: it has no excuse
				continue
			}
			s.side.Wrong++
			if len(s.side.WrongKeys) < 10 {
				s.side.WrongKeys = append(s.side.WrongKeys, k)
			}
		}
	}
	if rep.Effects, err = sink.judge(ctx, o.Keys, final); err != nil {
		return rep, fmt.Errorf("demo: reading the effects sink back failed: %w", err)
	}
	rep.InvariantOK = rep.Cairn.DoubleProcessed == 0 && rep.Cairn.StaleOverwrites == 0 && rep.Cairn.Wrong == 0 &&
		rep.Effects.Double == 0 && rep.Effects.Wrong == 0
	return rep, nil
}

// stateOf is the object state ev announces as bucketState and the serving
// tables show it: its ETag, "" for a removal (or no event).
func stateOf(ev event.Event) string {
	if ev.Kind == event.Removed {
		return ""
	}
	return ev.ETag
}

// write performs the writes and returns their events in sequencer order.
func write(ctx context.Context, o Options, rng *rand.Rand) ([]event.Event, int, error) {
	// Which key each write goes to: skewed, so overwrites are common.
	perKey := make([][]int, o.Keys)
	for w := range o.Writes {
		k := w % o.Keys
		if w >= o.Keys {
			k = int(float64(o.Keys) * rng.Float64() * rng.Float64())
		}
		perKey[k] = append(perKey[k], w)
	}
	deleteAt := map[int]bool{}
	for _, ws := range perKey {
		for j, w := range ws {
			if j > 0 && rng.Float64() < 0.08 {
				deleteAt[w] = true
			}
		}
	}
	var seq atomic.Uint64
	base := uint64(time.Now().UnixNano())
	evs := make([]event.Event, 0, o.Writes)
	var mu sync.Mutex
	var done atomic.Int64
	// The first failure cancels wctx: the other writers stop at their next
	// write and the loop handing out keys stops too (it blocked for ever on
	// writers that had all returned).
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range keys {
				key := keyName(k)
				for _, w := range perKey[k] {
					if wctx.Err() != nil {
						return
					}
					ev := event.Event{Bucket: o.Bucket, Key: key, Time: time.Now().UTC()}
					if deleteAt[w] {
						err := o.Store.Delete(wctx, key, objstore.Condition{})
						if err != nil && !errors.Is(err, objstore.ErrNotFound) {
							cancel(err)
							return
						}
						ev.Kind, ev.Name = event.Removed, "ObjectRemoved:Delete"
					} else {
						body := fmt.Appendf(nil, "%s written by write #%d\n", key, w)
						info, err := o.Store.PutBytes(wctx, key, body, nil)
						if err != nil {
							cancel(err)
							return
						}
						ev.Kind, ev.Name, ev.ETag, ev.Size = event.Created, "ObjectCreated:Put", info.ETag, info.Size
					}
					ev.Sequencer = fmt.Sprintf("%016X", base+seq.Add(1))
					mu.Lock()
					evs = append(evs, ev)
					mu.Unlock()
					o.Progress("writing objects", int(done.Add(1)), o.Writes)
				}
			}
		})
	}
hand:
	for k := range o.Keys {
		select {
		case keys <- k:
		case <-wctx.Done():
			break hand
		}
	}
	close(keys)
	wg.Wait()
	if err := context.Cause(wctx); err != nil {
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("demo: writing objects: stopped after %d of %d writes: %w", done.Load(), o.Writes, context.Cause(ctx))
		}
		return nil, 0, fmt.Errorf("demo: writing objects to the store failed after %d of %d writes: %w", done.Load(), o.Writes, err)
	}
	slices.SortFunc(evs, func(a, b event.Event) int { return event.CompareSequencer(a.Sequencer, b.Sequencer) })
	return evs, len(deleteAt), nil
}

type plan struct {
	order      []event.Event
	newestLost map[string]bool
}

// planDeliveries applies the faults: lost events, reordered overwrites,
// duplicates delivered concurrently or late.
func planDeliveries(evs []event.Event, o Options, rng *rand.Rand, rep *Report) plan {
	p := plan{newestLost: map[string]bool{}}
	// Reorder: swap some consecutive overwrites of a key.
	pos := map[string]int{} // key → index of its previous event
	order := slices.Clone(evs)
	for i := range order {
		k := order[i].Key
		if j, ok := pos[k]; ok && rng.Float64() < o.Reorder {
			order[i], order[j] = order[j], order[i]
			rep.Reordered++
		}
		pos[k] = i
	}
	// Which event is each key's newest (by sequencer)?
	newest := map[string]string{}
	for _, ev := range evs {
		newest[ev.Key] = ev.Sequencer
	}
	var late []event.Event
	for _, ev := range order {
		if rng.Float64() < o.Lost {
			rep.Lost++
			if newest[ev.Key] == ev.Sequencer {
				p.newestLost[ev.Key] = true
			}
			continue
		}
		p.order = append(p.order, ev)
		if rng.Float64() < o.Dup {
			copies := 1
			if rng.Float64() < 1.0/6 {
				copies = 2
			}
			for range copies {
				rep.Duplicates++
				if rng.Float64() < 0.5 {
					rep.Concurrent++
					p.order = append(p.order, ev) // next to the first: sent at the same time
				} else {
					rep.Late++
					late = append(late, ev)
				}
			}
		}
	}
	p.order = append(p.order, late...)
	return p
}

// deliver sends each delivery once, from senders goroutines, in plan order.
func deliver(ctx context.Context, order []event.Event, senders int, send func(i int, ev event.Event) error, progress func(int)) error {
	var done atomic.Int64
	return bench.ForEach(ctx, len(order), senders, func(i int) error {
		if err := send(i, order[i]); err != nil {
			return err
		}
		progress(int(done.Add(1)))
		return nil
	})
}

// runCairn starts the daemon on a loopback port, posts the deliveries to its
// webhook, waits until the ledger has no work left, then audits the bucket
// (LIST against the ledger) for the changes whose events were lost, and waits
// for that work too. It returns how many changes the audit resubmitted. With
// o.Crash it stops the daemon once while a handler is stuck (after the
// deliveries) and starts another; delivered is each key's newest delivered
// event.
func runCairn(ctx context.Context, o Options, order []event.Event, delivered map[string]event.Event, tables *tables, t *tracker, sink *sink) (int, error) {
	// The handler only writes the serving table and the sink, which never
	// fail when all is well: its first error ends the demo (the ledger would
	// retry it, and drain wait, for minutes).
	var handlerErr atomic.Pointer[error]
	fail := func(err error) { handlerErr.CompareAndSwap(nil, &err) }
	failed := func() error {
		if p := handlerErr.Load(); p != nil {
			return fmt.Errorf("demo: cairn's handler failed writing serving_cairn or its effect: %w", *p)
		}
		return nil
	}
	// The crash: the first run of a change that a newer delivery supersedes
	// gets stuck before its writes and stays stuck until its daemon stops;
	// its writes then wait (late) until the successor has written, and land.
	var stuck atomic.Bool
	var stuckWork intake.Work      // set before stalled is closed
	stalled := make(chan struct{}) // closed when a handler is stuck
	release := make(chan struct{}) // closed when the stuck writes may land
	releaseOnce := sync.OnceFunc(func() { close(release) })
	var late sync.WaitGroup
	defer late.Wait()
	defer releaseOnce()
	h := intake.HandlerFunc(func(hctx context.Context, w intake.Work) (string, error) {
		t.enter(w.Event)
		if w.Attempt > 1 {
			t.retry()
		}
		ev := w.Event
		if o.Crash && !event.IsAudit(ev.Name) && event.CompareSequencer(ev.Sequencer, delivered[ev.Key].Sequencer) < 0 && stuck.CompareAndSwap(false, true) {
			stuckWork = w
			close(stalled)
			<-hctx.Done() // the daemon stopped: its work is another's now
			late.Go(func() {
				<-release
				if err := tables.apply(ctx, "serving_cairn", ev, w.Token); err != nil {
					fail(err)
				}
				if err := sink.apply(ctx, ev, w.Token); err != nil {
					fail(err)
				}
			})
			return "", hctx.Err()
		}
		err := materialise(hctx, tables, sink, w)
		if err != nil && hctx.Err() == nil {
			fail(err)
		}
		return "", err
	})
	// The first daemon reaches the ledger through a connection the crash
	// kills: from then on every call fails, as for a process killed with
	// kill -9, which releases nothing, settles nothing and renews nothing.
	// Its claims are left to expire, and only then is the work another's.
	var killed atomic.Bool
	firstBackend := &killable{Backend: o.Ledger.Backend(), killed: &killed}
	first := ledger.New(firstBackend)
	start := func(l *ledger.Ledger) (stop func() error, url string, err error) {
		popts := &intake.Options{Concurrency: o.Concurrency, Poll: 50 * time.Millisecond, Logger: o.Logger}
		if o.Crash {
			popts.Grace = 200 * time.Millisecond // only the stuck handler is still running at the crash
			popts.Lease = runLease               // no claim runs out while its daemon lives
		}
		p, err := intake.New(l, h, popts)
		if err != nil {
			return nil, "", err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", fmt.Errorf("demo: listening for the webhook on a loopback port: %w", err)
		}
		dctx, cancel := context.WithCancel(ctx)
		d := &intake.Daemon{Pipeline: p, Listener: ln, Logger: o.Logger}
		done := make(chan error, 1)
		go func() { done <- d.Run(dctx) }()
		return func() error {
			cancel()
			if err := <-done; err != nil {
				return fmt.Errorf("demo: cairn's daemon failed: %w", err)
			}
			return nil
		}, "http://" + ln.Addr().String() + "/v1/events", nil
	}
	stop, url, err := start(first)
	if err != nil {
		return 0, err
	}
	defer func() {
		if stop != nil {
			_ = stop()
		}
	}()
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: o.Senders}}
	err = deliver(ctx, order, o.Senders, func(i int, ev event.Event) error {
		return post(ctx, client, url, event.S3Body(ev))
	}, func(n int) { o.Progress("cairn (webhook)", n, len(order)) })
	// Connections the client dialled but never sent a request on (a dial
	// that lost the race to a freed connection) are new, not idle, to the
	// server, and http.Server.Shutdown waits 5 s before it closes those: the
	// daemon's shutdown below took 0 or 5 s at random. Closed now, they are
	// gone when it stops.
	client.CloseIdleConnections()
	if err == nil && o.Crash {
		var crashed bool
		if crashed, err = waitStuck(ctx, o, stalled, failed); err == nil && crashed {
			o.Progress("cairn (crash, restart)", 0, 1)
			killed.Store(true)
			_ = stop() // a killed daemon reports nothing: its ledger calls fail
			stop = nil
			err = stillClaimed(ctx, o, stuckWork)
			if err == nil {
				err = shortenLease(ctx, o, firstBackend, stuckWork)
			}
			if err == nil {
				stop, _, err = start(o.Ledger)
			}
			if err == nil {
				err = drain(ctx, o, len(order), failed)
			}
			releaseOnce() // the stuck handler's writes land, after its successor's
			late.Wait()
			if err == nil {
				err = failed()
			}
		}
	}
	if err == nil {
		err = drain(ctx, o, len(order), failed)
	}
	found := 0
	if err == nil {
		// Every write is done and every delivery made, so no event is still on
		// its way: the audit needs no grace period here.
		o.Progress("cairn (audit)", 0, 1)
		var rep *audit.Report
		rep, err = audit.Run(ctx, o.Store, o.Ledger, o.Bucket, &audit.Options{Grace: time.Nanosecond})
		if err != nil {
			err = fmt.Errorf("demo: cairn's audit of the bucket failed: %w", err)
		} else {
			found = rep.Resubmitted
			err = drain(ctx, o, len(order), failed)
		}
	}
	if stop != nil {
		derr := stop()
		stop = nil
		if err == nil {
			err = derr
		}
	}
	return found, err
}

// materialise is cairn's handler's work for w: its serving row and its
// effect, both conditional on w's fencing token.
func materialise(ctx context.Context, tables *tables, sink *sink, w intake.Work) error {
	err := tables.apply(ctx, "serving_cairn", w.Event, w.Token)
	if err == nil {
		err = sink.apply(ctx, w.Event, w.Token)
	}
	return err
}

// stillClaimed checks that the killed daemon left w's claim as it was, to
// expire: not released, not settled.
func stillClaimed(ctx context.Context, o Options, w intake.Work) error {
	rs, err := o.Ledger.Get(ctx, w.Event.Bucket, w.Event.Key)
	if err != nil {
		return fmt.Errorf("demo: reading the crashed claim's record: %w", err)
	}
	for _, r := range rs {
		if r.Status == ledger.Claimed && r.Token == w.Token {
			return nil
		}
	}
	return fmt.Errorf("demo: the killed daemon's claim of %q (token %d) did not stay claimed: %+v", w.Event.Key, w.Token, rs)
}

// runLease is the claims' lease in a demo with a crash, renewed every third
// of it while a handler runs: long enough that no renewal delayed by a loaded
// machine lets a live daemon's claim run out (with 2 s leases a renewal held
// up by a busy SQLite file did, and the first daemon stopped its own stuck
// handler and took the work over itself before the crash). crashLease is
// what the killed daemon's stuck claim is left with: its last renewal, made
// once it is dead (shortenLease), is for crashLease, and the successor waits
// that out, not a runLease, before it takes the work over.
const (
	runLease   = intake.DefaultLease
	crashLease = 2 * time.Second
)

// shortenLease renews the killed daemon's claim of w, for crashLease from
// now: as if the daemon had held it with a short lease and died just after
// renewing. Called once the daemon has stopped, so no renewal of its own can
// land after this one.
func shortenLease(ctx context.Context, o Options, k *killable, w intake.Work) error {
	c, ok := k.claim(w)
	if !ok {
		return fmt.Errorf("demo: the killed daemon's claim of %q (token %d) was never handed out by its ledger", w.Event.Key, w.Token)
	}
	if _, err := o.Ledger.Renew(ctx, c, crashLease); err != nil {
		return fmt.Errorf("demo: renewing the killed daemon's claim of %q (token %d) for %v: %w", w.Event.Key, w.Token, crashLease, err)
	}
	return nil
}

// killable is a ledger whose connection can be killed: once killed, every
// call that a daemon makes to claim, renew or settle work fails (what a
// process killed with kill -9 does: nothing), and the rest still reads.
type killable struct {
	ledger.Backend
	killed *atomic.Bool

	mu     sync.Mutex
	claims map[claimID]ledger.Claim // each claim handed out or renewed, newest
}

type claimID struct {
	bucket, key string
	token       int64
}

// keep remembers claims, for claim.
func (k *killable) keep(cs ...ledger.Claim) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.claims == nil {
		k.claims = map[claimID]ledger.Claim{}
	}
	for _, c := range cs {
		k.claims[claimID{c.Bucket, c.Key, c.Token}] = c
	}
}

// claim is the claim w's handler runs under.
func (k *killable) claim(w intake.Work) (ledger.Claim, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.claims[claimID{w.Event.Bucket, w.Event.Key, w.Token}]
	return c, ok
}

// errKilled is what a killed daemon's calls get: its connection is gone
// (claiming or recording fails as while the ledger is unreachable), and so
// are its claims: renewing or settling one is refused as for a lost lease, so
// that its pipeline gives up at once, as a dead process does nothing, instead
// of retrying until the claim's lease would run out.
var (
	errKilled      = fmt.Errorf("demo: the daemon was killed: %w", ledger.ErrUnavailable)
	errKilledClaim = fmt.Errorf("demo: the daemon was killed, with its claims: %w", ledger.ErrLeaseLost)
)

func (k *killable) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	if k.killed.Load() {
		return nil, nil, errKilled
	}
	ds, cs, err := k.Backend.RecordAndClaim(ctx, source, evs, n, lease)
	k.keep(cs...)
	return ds, cs, err
}

func (k *killable) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	if k.killed.Load() {
		return nil, errKilled
	}
	cs, err := k.Backend.Claim(ctx, n, lease)
	k.keep(cs...)
	return cs, err
}

func (k *killable) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	if k.killed.Load() {
		return ledger.Claim{}, errKilledClaim
	}
	c, err := k.Backend.Renew(ctx, c, lease)
	if err == nil {
		k.keep(c)
	}
	return c, err
}

func (k *killable) Complete(ctx context.Context, c ledger.Claim, result string) error {
	if k.killed.Load() {
		return errKilledClaim
	}
	return k.Backend.Complete(ctx, c, result)
}

func (k *killable) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	if k.killed.Load() {
		return nil, errKilledClaim
	}
	return k.Backend.CompleteBatch(ctx, cs, results)
}

func (k *killable) Release(ctx context.Context, c ledger.Claim) error {
	if k.killed.Load() {
		return errKilledClaim
	}
	return k.Backend.Release(ctx, c)
}

func (k *killable) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	if k.killed.Load() {
		return errKilledClaim
	}
	return k.Backend.Fail(ctx, c, cause, retryable)
}

// Close leaves the shared ledger open: the demo closes it.
func (k *killable) Close() error { return nil }

// waitStuck waits, after the deliveries, until a handler is stuck and it holds
// the only work left (true), or until no work is left because none got stuck
// (false: no run of a superseded change was claimed before its successor
// arrived).
func waitStuck(ctx context.Context, o Options, stalled <-chan struct{}, failed func() error) (bool, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := failed(); err != nil {
			return false, err
		}
		c, err := o.Ledger.Counts(ctx)
		if err != nil {
			return false, fmt.Errorf("demo: counting the ledger's records failed: %w", err)
		}
		left := c[ledger.Pending] + c[ledger.Claimed] + c[ledger.Failed]
		select {
		case <-stalled:
			if left <= 1 {
				return true, nil
			}
		default:
			if left == 0 {
				return false, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("demo: %d records still not processed after 5 minutes", left)
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("demo: waiting for cairn's handlers: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// post delivers one body, retrying while the server says 503 (as MinIO's
// webhook target does).
func post(ctx context.Context, c *http.Client, url string, body []byte) error {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json") // as MinIO sends
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("demo: posting to the webhook: %w", err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable && attempt < 20:
			select {
			case <-ctx.Done():
				return fmt.Errorf("demo: posting to the webhook: %w (it answered %s: %s)", context.Cause(ctx), resp.Status, msg)
			case <-time.After(50 * time.Millisecond << min(attempt, 5)):
			}
		default:
			return fmt.Errorf("demo: webhook answered %s: %s", resp.Status, msg)
		}
	}
}

// drain waits until the ledger holds no pending, claimed or failed work, or
// failed says the handler failed.
func drain(ctx context.Context, o Options, total int, failed func() error) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := failed(); err != nil {
			return err
		}
		c, err := o.Ledger.Counts(ctx)
		if err != nil {
			return fmt.Errorf("demo: counting the ledger's records failed: %w", err)
		}
		left := c[ledger.Pending] + c[ledger.Claimed] + c[ledger.Failed]
		o.Progress("cairn (handlers)", total-left, total)
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d records still not processed after 5 minutes", left)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: waiting for cairn's handlers: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bucketState is each demo key's ETag in the bucket ("" if absent).
func bucketState(ctx context.Context, o Options) (map[string]string, error) {
	out := map[string]string{}
	for i := range o.Keys {
		k := keyName(i)
		info, err := o.Store.Head(ctx, k)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			out[k] = ""
		case err != nil:
			return nil, err
		default:
			out[k] = info.ETag
		}
	}
	return out, nil
}

// tracker counts handler runs per change and stale applications.
type tracker struct {
	mu     sync.Mutex
	runs   map[string]int    // key + sequencer + state → runs
	newest map[string]string // key → newest sequencer applied
	stale  int
	// retried: runs that were not their work's first attempt.
	retried int
}

func newTracker() *tracker { return &tracker{runs: map[string]int{}, newest: map[string]string{}} }

func (t *tracker) enter(ev event.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A change is a key's sequencer and the state it announces (an audit's
	// resubmission has no sequencer, and the state it found).
	t.runs[ev.Key+"\x00"+ev.Sequencer+"\x00"+ev.ETag+"\x00"+string(ev.Kind)]++
	if event.IsAudit(ev.Name) {
		// An audit's resubmission carries no sequencer (S3 never numbered the
		// change) and announces the state the audit found in the bucket, after
		// every delivery here: it is never stale, and orders nothing.
		return
	}
	if n, ok := t.newest[ev.Key]; ok && event.CompareSequencer(ev.Sequencer, n) < 0 {
		t.stale++
		return
	}
	t.newest[ev.Key] = ev.Sequencer
}

func (t *tracker) retry() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retried++
}

func (t *tracker) counts() (runs, double, stale int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.runs {
		runs += n
		double += n - 1
	}
	return runs, double, t.stale
}

// tables are the serving tables in SQLite.
type tables struct{ db *sql.DB }

func openTables(path string) (*tables, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	for _, t := range []string{"serving_naive", "serving_cairn"} {
		if _, err := db.Exec(`DROP TABLE IF EXISTS ` + t + `; CREATE TABLE ` + t + ` (key TEXT PRIMARY KEY, etag TEXT NOT NULL,
size INTEGER NOT NULL, sequencer TEXT NOT NULL, deleted INTEGER NOT NULL, token INTEGER NOT NULL)`); err != nil {
			db.Close()
			return nil, fmt.Errorf("demo: serving table: %w", err)
		}
	}
	return &tables{db: db}, nil
}

// apply materialises one event into table. With a fencing token (cairn) the
// write is conditional: it never replaces a row written under a higher token,
// so a stalled holder whose lease was taken over cannot undo its successor.
// Removals keep a tombstone row, so the token survives them.
func (t *tables) apply(ctx context.Context, table string, ev event.Event, token int64) error {
	deleted := 0
	if ev.Kind == event.Removed {
		deleted = 1
	}
	_, err := t.db.ExecContext(ctx, `INSERT INTO `+table+` (key, etag, size, sequencer, deleted, token) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET etag = excluded.etag, size = excluded.size, sequencer = excluded.sequencer,
  deleted = excluded.deleted, token = excluded.token WHERE excluded.token >= `+table+`.token`,
		ev.Key, ev.ETag, ev.Size, ev.Sequencer, deleted, token)
	return err
}

// rows is each key's served ETag ("" if absent or deleted).
func (t *tables) rows(ctx context.Context, table string) (map[string]string, error) {
	rs, err := t.db.QueryContext(ctx, `SELECT key, etag, deleted FROM `+table)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var k, etag string
		var deleted bool
		if err := rs.Scan(&k, &etag, &deleted); err != nil {
			return nil, err
		}
		if !deleted {
			out[k] = etag
		}
	}
	return out, rs.Err()
}

// effect is what cairn's handler writes into the sink per key: the change it
// applies, and how many times that change was written.
type effect struct {
	Sequencer string `json:"sequencer,omitempty"`
	State     string `json:"state"` // the ETag, "" for a removal
	Token     int64  `json:"token"`
	Writes    int    `json:"writes"`
}

// sink is where cairn's handler writes effects, fenced by its claim's token.
type sink struct {
	store   *objstore.Store
	refused atomic.Int64
}

// read returns key's effect, if any.
func (s *sink) read(ctx context.Context, key string) (effect, bool, error) {
	data, _, err := fence.Get(ctx, s.store, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return effect{}, false, nil
	}
	if err != nil {
		return effect{}, false, err
	}
	var e effect
	if err := json.Unmarshal(data, &e); err != nil {
		return effect{}, false, fmt.Errorf("demo: the effect of %q: %w", key, err)
	}
	return e, true, nil
}

// apply writes ev's effect with token. A write refused as stale (a newer
// holder has written) is counted, and no error: the work is the newer
// holder's.
func (s *sink) apply(ctx context.Context, ev event.Event, token int64) error {
	cur, found, err := s.read(ctx, ev.Key)
	if err != nil {
		return err
	}
	e := effect{Sequencer: ev.Sequencer, State: stateOf(ev), Token: token, Writes: 1}
	if found && cur.Sequencer == e.Sequencer && cur.State == e.State {
		e.Writes = cur.Writes + 1 // the same change again: a double effect
	}
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fence.PutBytes(ctx, s.store, ev.Key, body, token, nil)
	if errors.Is(err, fence.ErrStale) {
		s.refused.Add(1)
		return nil
	}
	return err
}

// judge reads every key's effect back and compares it with the bucket's
// final state.
func (s *sink) judge(ctx context.Context, keys int, final map[string]string) (Effects, error) {
	out := Effects{StaleRefused: int(s.refused.Load())}
	for i := range keys {
		k := keyName(i)
		e, found, err := s.read(ctx, k)
		if err != nil {
			return out, err
		}
		switch {
		case !found && final[k] == "":
			// Never written: no change of this key reached cairn, and none
			// was needed (the object is absent).
		case !found || e.State != final[k]:
			out.Wrong++
			if len(out.WrongKeys) < 10 {
				out.WrongKeys = append(out.WrongKeys, k)
			}
		case e.Writes > 1:
			out.Double++
		default:
			out.ExactlyOnce++
		}
	}
	return out, nil
}
