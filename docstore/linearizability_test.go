package docstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// The model: one integer counter. An "add" returns the value after it; a "read"
// returns the value. An operation whose outcome is unknown (a lost response the
// client could not resolve) may or may not have taken effect.
type counterIn struct {
	Read  bool `json:"read"`
	Delta int  `json:"delta"`
}

type counterOut struct {
	Value   int  `json:"value"`
	Unknown bool `json:"unknown"`
}

var counterModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{0} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int), input.(counterIn), output.(counterOut)
		switch {
		case in.Read:
			if out.Value == s {
				return []any{s}
			}
			return nil
		case out.Unknown:
			return []any{s, s + in.Delta}
		case out.Value == s+in.Delta:
			return []any{s + in.Delta}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(counterIn), output.(counterOut)
		if in.Read {
			return fmt.Sprintf("read() -> %d", out.Value)
		}
		if out.Unknown {
			return fmt.Sprintf("add(%d) -> ?", in.Delta)
		}
		return fmt.Sprintf("add(%d) -> %d", in.Delta, out.Value)
	},
}

// recorder collects a history with one monotonic clock.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(client int, in counterIn, call int64, out counterOut, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// client is what the linearizability test drives.
type client interface {
	read(ctx context.Context) (int, error)
	add(ctx context.Context, delta int) (int, error)
}

type cairnClient struct{ d *docstore.Store }

func (c cairnClient) read(ctx context.Context) (int, error) {
	v, _, err := docstore.Typed[int](c.d).Load(ctx, "counter")
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, nil
	}
	return v, err
}

func (c cairnClient) add(ctx context.Context, delta int) (int, error) {
	v, _, err := docstore.Typed[int](c.d).Update(ctx, "counter", func(v *int, _ docstore.Meta) error { *v += delta; return nil })
	return v, err
}

// naiveClient is the textbook loop without nonces: GET, modify, PUT If-Match,
// and on any error other than a 412 simply try again. After a lost response
// whose write was applied, it applies the same addition a second time.
type naiveClient struct{ s *objstore.Store }

func (c naiveClient) read(ctx context.Context) (int, error) {
	data, _, err := c.s.GetBytes(ctx, "counter")
	if errors.Is(err, objstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(data))
}

func (c naiveClient) add(ctx context.Context, delta int) (int, error) {
	for attempt := 0; attempt < 200; attempt++ {
		data, info, err := c.s.GetBytes(ctx, "counter")
		cond, n := objstore.IfMatch(info.ETag), 0
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			cond = objstore.IfAbsent()
		case err != nil:
			continue
		default:
			n, _ = strconv.Atoi(string(data))
		}
		if _, err := c.s.PutBytes(ctx, "counter", []byte(strconv.Itoa(n+delta)), &objstore.PutOptions{If: cond}); err == nil {
			return n + delta, nil
		}
	}
	return 0, errors.New("naive: gave up")
}

// runHistory drives clients concurrently and returns the history.
func runHistory(t *testing.T, clients []client, opsPerClient int, seed uint64) []porcupine.Operation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := &recorder{start: time.Now()}
	var wg sync.WaitGroup
	for id, c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(id)))
		wg.Go(func() {
			for range opsPerClient {
				call := rec.now()
				if rng.IntN(10) < 3 {
					v, err := c.read(ctx)
					if err == nil {
						rec.add(id, counterIn{Read: true}, call, counterOut{Value: v}, rec.now())
					}
					continue
				}
				delta := 1 + rng.IntN(5)
				v, err := c.add(ctx, delta)
				switch {
				case err == nil:
					rec.add(id, counterIn{Delta: delta}, call, counterOut{Value: v}, rec.now())
				case errors.Is(err, objstore.ErrAmbiguous):
					// May take effect at any time after the call.
					rec.add(id, counterIn{Delta: delta}, call, counterOut{Unknown: true}, math.MaxInt64)
				default:
					// A definite failure was not applied: no operation.
				}
			}
		})
	}
	wg.Wait()
	// A final read after everything, by a fault-free reader.
	return rec.ops
}

func check(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, _ := porcupine.CheckOperationsVerbose(counterModel.ToModel(), ops, 60*time.Second)
	return res
}

func finalRead(rec []porcupine.Operation, client int, v int) []porcupine.Operation {
	var last int64
	for _, o := range rec {
		if o.Return != math.MaxInt64 && o.Return > last {
			last = o.Return
		}
	}
	return append(rec, porcupine.Operation{ClientId: client, Input: counterIn{Read: true}, Call: last + 1, Output: counterOut{Value: v}, Return: last + 2})
}

// faultyMem is a memory store behind every write fault: failures, lost
// responses, lost requests and late-landing requests.
func faultyMem(seed uint64) (*objstore.Store, *faulty.Backend, *objstore.Store) {
	inner := mem.OpenBackend("")
	f := faulty.New(inner, &faulty.Options{Seed: seed, FailRate: 0.05, LostResponseRate: 0.08, LostRequestRate: 0.04,
		LateApplyRate: 0.08, LateJitter: 3 * time.Millisecond, Jitter: 300 * time.Microsecond})
	return objstore.New(f, nil), f, objstore.New(inner, nil)
}

func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"group-commit", "store-per-client"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= 3; seed++ {
				s, f, clean := faultyMem(seed)
				var clients []client
				shared := docstore.New(s, nil)
				for range 8 {
					d := shared
					if mode == "store-per-client" {
						d = docstore.New(s, nil)
					}
					clients = append(clients, cairnClient{d})
				}
				ops := runHistory(t, clients, 25, seed)
				f.Wait() // the final read comes after every late request
				v, err := cairnClient{docstore.New(clean, nil)}.read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				ops = finalRead(ops, 8, v)
				if res := check(t, ops); res != porcupine.Ok {
					dump(t, ops)
					t.Fatalf("seed %d: history of %d operations is %s", seed, len(ops), res)
				}
				st, fs := shared.Stats(), f.Stats()
				t.Logf("seed %d: %d ops, final %d; shared store: %d updates, %d writes, %d redrives, %d unknown outcomes resolved, %d unresolved; injected %d late (%d landed), %d lost responses, %d lost requests, %d failures",
					seed, len(ops), v, st.Updates, st.Writes, st.Redrives, st.Resolved, st.Ambiguous, fs.LateApplied, fs.LateLanded, fs.LostResponses, fs.LostRequests, fs.Failed)
			}
		})
	}
}

// The naive loop must be caught: every fifth PUT loses its response after the
// server applied it, and the naive client applies its addition again.
func TestCheckerCatchesNaiveClient(t *testing.T) {
	t.Parallel()
	inner := mem.OpenBackend("")
	var mu sync.Mutex
	puts := 0
	f := faulty.New(inner, &faulty.Options{Rule: func(op faulty.Op, _ string) (faulty.Fault, time.Duration) {
		if op != faulty.OpPut {
			return faulty.None, 100 * time.Microsecond
		}
		mu.Lock()
		defer mu.Unlock()
		puts++
		if puts%5 == 0 {
			return faulty.LostResponse, 0
		}
		return faulty.None, 100 * time.Microsecond
	}})
	s := objstore.New(f, nil)
	var clients []client
	for range 4 {
		clients = append(clients, naiveClient{s})
	}
	ops := runHistory(t, clients, 15, 42)
	v, err := naiveClient{objstore.New(inner, nil)}.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ops = finalRead(ops, 4, v)
	if res := check(t, ops); res != porcupine.Illegal {
		t.Fatalf("the checker accepted the naive client's history (%s); it must be able to fail", res)
	}
}

// The checker itself is tested on known histories kept as golden files.
func TestGoldenHistories(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]porcupine.CheckResult{
		"testdata/history-good.json":              porcupine.Ok,
		"testdata/history-bad-double-apply.json":  porcupine.Illegal,
		"testdata/history-bad-stale-read.json":    porcupine.Illegal,
		"testdata/history-good-unknown-lost.json": porcupine.Ok,
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var raw []struct {
			Client int        `json:"client"`
			In     counterIn  `json:"in"`
			Call   int64      `json:"call"`
			Out    counterOut `json:"out"`
			Return int64      `json:"return"`
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var ops []porcupine.Operation
		for _, r := range raw {
			ret := r.Return
			if ret < 0 {
				ret = math.MaxInt64
			}
			ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: ret})
		}
		if got := check(t, ops); got != want {
			t.Errorf("%s: checker says %s, want %s", file, got, want)
		}
	}
}

// Linearizable under faults on every S3 server the suite runs.
func TestLinearizableOnS3Servers(t *testing.T) {
	for _, server := range testenv.S3ServerNames() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			ep := testenv.S3Server(t, server)
			b, _ := testenv.NewBucket(t, ep)
			f := faulty.New(b, &faulty.Options{Seed: 9, LostResponseRate: 0.06, LostRequestRate: 0.04, FailRate: 0.03,
				LateApplyRate: 0.08, LateJitter: 10 * time.Millisecond})
			clean := objstore.New(b, nil)
			ops, v := checkMixedClients(t, faultyOver(t, clean, f), clean, 9, f.Wait)
			st := f.Stats()
			t.Logf("%d ops on %s, final %d; injected %d late (%d landed), %d lost responses, %d lost requests, %d failures", len(ops), server, v, st.LateApplied, st.LateLanded, st.LostResponses, st.LostRequests, st.Failed)
		})
	}
}

// checkMixedClients runs 8 clients on s (half with group commit, half
// without), waits for the faults' late requests (settle), reads the final
// value through clean, and fails the test unless the history is linearizable
// and some update took effect.
func checkMixedClients(t *testing.T, s, clean *objstore.Store, seed uint64, settle func()) ([]porcupine.Operation, int) {
	t.Helper()
	var clients []client
	for i := range 8 {
		d := docstore.New(s, nil)
		if i%2 == 0 {
			d = docstore.New(s, &docstore.Options{NoGroupCommit: true})
		}
		clients = append(clients, cairnClient{d})
	}
	ops := runHistory(t, clients, 12, seed)
	settle()
	v, err := cairnClient{docstore.New(clean, nil)}.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v == 0 {
		t.Fatalf("no update took effect: the history tests nothing")
	}
	ops = finalRead(ops, 8, v)
	if res := check(t, ops); res != porcupine.Ok {
		dump(t, ops)
		t.Fatalf("history on %s is %s", s, res)
	}
	return ops, v
}

func dump(t *testing.T, ops []porcupine.Operation) {
	for _, o := range ops {
		t.Logf("client %d [%d, %d] %s", o.ClientId, o.Call, o.Return, counterModel.DescribeOperation(o.Input, o.Output))
	}
}

// The history over real HTTP through the network fault proxy: connections
// dropped before the server, after it, and with the request forwarded later.
func TestLinearizableThroughNetworkFaultsOnMinIO(t *testing.T) {
	t.Parallel()
	s, proxy, clean := throughProxy(t)
	ops, v := checkMixedClients(t, s, clean, 13, proxy.Wait)
	st := proxy.Stats()
	t.Logf("%d ops, final %d; proxy: %d requests, %d late (%d landed), %d lost responses, %d lost requests", len(ops), v, st.Requests, st.Late, st.LateLanded, st.LostResponses, st.LostRequests)
}
