package docstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// lateFaults mixes every write fault the guarantee is claimed against: requests
// lost before the server, responses lost after it applied the write, and
// requests the client gave up on that the server applies later.
func lateFaults(seed uint64) *faulty.Options {
	return &faulty.Options{Seed: seed, FailRate: 0.03, LostRequestRate: 0.05, LostResponseRate: 0.05,
		LateApplyRate: 0.15, LateJitter: 5 * time.Millisecond, Jitter: 300 * time.Microsecond}
}

// counterTally is what the writers of a CAS counter were told.
type counterTally struct {
	mu                    sync.Mutex
	ok, ambiguous, failed int
	otherErrs             []error
}

func (c *counterTally) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.ok++
	case errors.Is(err, objstore.ErrAmbiguous):
		c.ambiguous++
	default:
		c.failed++
		if len(c.otherErrs) < 3 {
			c.otherErrs = append(c.otherErrs, err)
		}
	}
}

// check: every nil was applied exactly once, every ErrAmbiguous at most once,
// nothing else at all: ok <= final <= ok + ambiguous.
func (c *counterTally) check(t *testing.T, final int) {
	t.Helper()
	t.Logf("final %d: %d updates succeeded, %d ambiguous, %d failed (e.g. %v)", final, c.ok, c.ambiguous, c.failed, c.otherErrs)
	if final < c.ok || final > c.ok+c.ambiguous {
		t.Fatalf("counter is %d after %d successful and %d ambiguous increments: an update was applied %s",
			final, c.ok, c.ambiguous, map[bool]string{true: "more than once", false: "not at all"}[final > c.ok])
	}
}

// runCounter has writers increment one counter through their docstore.Stores and
// returns what they were told.
func runCounter(t *testing.T, stores []*docstore.Store, perWriter int) *counterTally {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tally := &counterTally{}
	var wg sync.WaitGroup
	for _, d := range stores {
		for range 2 { // two callers per store, so group commit batches
			wg.Go(func() {
				for range perWriter {
					_, _, err := docstore.Typed[int](d).Update(ctx, "counter", func(v *int, _ docstore.Meta) error { *v++; return nil })
					tally.add(err)
				}
			})
		}
	}
	wg.Wait()
	return tally
}

// faultyOver is f as a Store with the capabilities probed on clean, the same
// server without faults: a probe through the faults would fail and leave
// nothing to test.
func faultyOver(t *testing.T, clean *objstore.Store, f *faulty.Backend) *objstore.Store {
	t.Helper()
	caps, err := clean.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !caps.ConditionalWrites() {
		t.Fatalf("%s does not enforce conditional writes: %+v", clean, caps)
	}
	return objstore.New(f, &objstore.Options{Capabilities: &caps})
}

// mustSucceed fails the test unless most updates succeeded: a history of
// errors tests nothing.
func (c *counterTally) mustSucceed(t *testing.T) {
	t.Helper()
	if c.ok < (c.ok+c.ambiguous+c.failed)/2 {
		t.Fatalf("only %d of %d updates succeeded: the faults leave nothing to check", c.ok, c.ok+c.ambiguous+c.failed)
	}
}

func readCounter(t *testing.T, s *objstore.Store) int {
	t.Helper()
	v, _, err := docstore.Typed[int](docstore.New(s, nil)).Load(context.Background(), "counter")
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	return v
}

// A write the client gave up on lands later. Updates must still be applied
// exactly once (nil) or at most once (ErrAmbiguous), never more.
func TestCounterUnderLateLanding(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"group-commit", "no-group-commit"} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed-%d", mode, seed), func(t *testing.T) {
				t.Parallel()
				inner := mem.OpenBackend("")
				f := faulty.New(inner, lateFaults(seed))
				s := objstore.New(f, nil)
				var stores []*docstore.Store
				for range 3 {
					stores = append(stores, docstore.New(s, &docstore.Options{NoGroupCommit: mode == "no-group-commit", BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
				}
				tally := runCounter(t, stores, 40)
				f.Wait() // every late request has landed or failed
				tally.check(t, readCounter(t, objstore.New(inner, nil)))
				tally.mustSucceed(t)
				st := f.Stats()
				t.Logf("injected: %d late (%d landed), %d lost responses, %d lost requests, %d failures", st.LateApplied, st.LateLanded, st.LostResponses, st.LostRequests, st.Failed)
			})
		}
	}
}

func TestCounterUnderLateLandingOnMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	b, _ := testenv.NewBucket(t, ep)
	f := faulty.New(b, lateFaults(7))
	s := faultyOver(t, objstore.New(b, nil), f)
	stores := []*docstore.Store{docstore.New(s, nil), docstore.New(s, nil), docstore.New(s, &docstore.Options{NoGroupCommit: true})}
	tally := runCounter(t, stores, 25)
	f.Wait()
	tally.check(t, readCounter(t, objstore.New(b, nil)))
	tally.mustSucceed(t)
	st := f.Stats()
	t.Logf("injected: %d late (%d landed), %d lost responses, %d lost requests, %d failures", st.LateApplied, st.LateLanded, st.LostResponses, st.LostRequests, st.Failed)
}

// proxyFaults are the network's faults at the rates the histories use.
var proxyFaults = faultproxy.Options{Seed: 11, LostRequestRate: 0.04, LostResponseRate: 0.06, LateRate: 0.12, LateJitter: 15 * time.Millisecond}

// throughProxy is a store on a fresh MinIO bucket whose requests go through
// the fault proxy (faults on, capabilities probed without them), the proxy,
// and a store on the same bucket without faults.
func throughProxy(t *testing.T) (*objstore.Store, *faultproxy.Proxy, *objstore.Store) {
	t.Helper()
	ep := testenv.S3(t)
	b, url := testenv.NewBucket(t, ep)
	u, _ := objstore.ParseURL(url)
	proxy, pb := testenv.ThroughFaultProxy(t, ep, u.Host)
	clean := objstore.New(b, nil)
	caps, err := clean.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetOptions(proxyFaults)
	return objstore.New(pb, &objstore.Options{Capabilities: &caps}), proxy, clean
}

// The same counter over real HTTP to MinIO through a proxy that drops the
// client's connection and forwards some PUTs later, as a load balancer or a
// slow server does: the faults as a real client sees them (connection resets
// mapped by the S3 backend), not as an in-process wrapper fakes them.
func TestCounterThroughNetworkFaultsOnMinIO(t *testing.T) {
	t.Parallel()
	s, proxy, clean := throughProxy(t)
	stores := []*docstore.Store{docstore.New(s, nil), docstore.New(s, nil), docstore.New(s, &docstore.Options{NoGroupCommit: true})}
	tally := runCounter(t, stores, 25)
	proxy.Wait()
	tally.check(t, readCounter(t, clean))
	tally.mustSucceed(t)
	st := proxy.Stats()
	t.Logf("proxy: %d requests, %d late (%d landed), %d lost responses, %d lost requests", st.Requests, st.Late, st.LateLanded, st.LostResponses, st.LostRequests)
	if st.LateLanded == 0 {
		t.Errorf("no late request landed: the test did not exercise the fault")
	}
}

// The register: a version whose first write landed with its response lost,
// and whose resend then failed outright, may exist. The update must be
// reported ambiguous, never retried as a new version (applied twice).
func TestRegisterUnknownWriteNotRepeated(t *testing.T) {
	t.Parallel()
	inner := mem.OpenBackend("")
	var mu sync.Mutex
	puts := 0
	f := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if op != faulty.OpPut {
			return faulty.None, 0
		}
		puts++
		switch puts {
		case 2:
			return faulty.LostResponse, 0 // the increment's version: applied, response lost
		case 3:
			return faulty.Fail, 0 // its resend: refused outright
		}
		return faulty.None, 0
	}})
	d := docstore.New(objstore.New(f, nil), &docstore.Options{Strategy: docstore.Register, LastWriterWins: true, BaseBackoff: time.Millisecond})
	ctx := context.Background()
	inc := func(v *int, _ docstore.Meta) error { *v++; return nil }
	if _, _, err := docstore.Typed[int](d).Update(ctx, "counter", inc); err != nil { // put 1: creates 1
		t.Fatal(err)
	}
	_, _, err := docstore.Typed[int](d).Update(ctx, "counter", inc)
	if !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("update whose version may exist: %v, want ErrAmbiguous", err)
	}
	v, _, err := docstore.Typed[int](docstore.New(objstore.New(inner, nil), &docstore.Options{Strategy: docstore.Register, LastWriterWins: true})).Load(ctx, "counter")
	if err != nil || v != 2 {
		t.Fatalf("counter %d (%v), want 2: the increment applied at most once", v, err)
	}
}

// The same counters under each server's way of answering: 404 for If-Match on
// a missing key (AWS, versitygw), 409 to a racing conditional writer (AWS),
// 204 for a conditional delete of a missing key (versitygw); with late, lost
// and failed requests on top. Exactly once (nil) or at most once
// (ErrAmbiguous), never more, under every mapping.
func TestCounterUnderServerQuirks(t *testing.T) {
	t.Parallel()
	for name, q := range map[string]faulty.Quirks{
		"404-if-match-missing": {MissingIfMatchNotFound: true},
		"409-racing-writer":    {ConflictRate: 0.1},
		"all":                  {MissingIfMatchNotFound: true, ConflictRate: 0.1, DeleteMissingOK: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inner := mem.OpenBackend("")
			o := lateFaults(7)
			o.Quirks = q
			f := faulty.New(inner, o)
			caps, _ := inner.Capabilities()
			s := objstore.New(f, &objstore.Options{Capabilities: &caps})
			var stores []*docstore.Store
			for _, noGC := range []bool{false, true} {
				stores = append(stores, docstore.New(s, &docstore.Options{NoGroupCommit: noGC, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
			}
			tally := runCounter(t, stores, 40)
			f.Wait()
			tally.check(t, readCounter(t, objstore.New(inner, nil)))
			tally.mustSucceed(t)
		})
	}
}
