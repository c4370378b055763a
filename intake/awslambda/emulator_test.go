package awslambda_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/internal/testing/lambdatest"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	_ "github.com/cairn-s3/cairn/ledger/dynamoledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	_ "github.com/cairn-s3/cairn/ledger/postgres"
	"github.com/cairn-s3/cairn/objstore"
)

// rig is one test's ledger, store and run log, shared by the emulators it
// starts (separate sandboxes of one function).
type rig struct {
	t         *testing.T
	ledgerURL string
	storeURL  string
	runs      string
	env       []string
	l         *ledger.Ledger
	s         *objstore.Store
	boot      string
}

// ledgers are the shared ledgers the function runs on: the object-store
// ledger in the bucket itself (MinIO), PostgreSQL and DynamoDB (dynalite).
var ledgers = []string{"objledger", "postgres", "dynamodb"}

func newRig(t *testing.T, which string) *rig {
	t.Helper()
	ep := testenv.S3(t)
	be, storeURL := testenv.NewBucket(t, ep)
	r := &rig{t: t, storeURL: storeURL, runs: t.TempDir(), env: ep.Env()}
	switch which {
	case "objledger":
		u := strings.Replace(storeURL, "?", "/ledger?", 1)
		r.ledgerURL = u
	case "postgres":
		r.ledgerURL = testenv.PostgresSchema(t, testenv.PGExec)
	case "dynamodb":
		r.ledgerURL = fmt.Sprintf("dynamodb://%s?endpoint=%s&region=us-east-1&create_table=true", testenv.UniqueName("cairn-lambda"), testenv.DynamoDB(t))
		// dynalite takes any credentials: MinIO's serve for both.
	}
	// This process opens the bucket with the endpoint's credentials (the
	// environment may hold another server's); the function gets them in its
	// environment.
	ctx := context.Background()
	r.s = objstore.New(be, nil)
	var err error
	if which == "objledger" {
		pb, perr := objstore.Prefixed(be, "ledger")
		if perr != nil {
			t.Fatal(perr)
		}
		r.l, err = objledger.Open(ctx, objstore.New(pb, nil), nil, nil)
	} else {
		r.l, err = ledger.Open(ctx, r.ledgerURL, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.l.Close() })
	r.boot = lambdatest.BuildBootstrap(t, "github.com/cairn-s3/cairn/intake/awslambda/internal/testfn")
	return r
}

// function starts one more sandbox of the function.
func (r *rig) function(timeout time.Duration) *lambdatest.Emulator {
	env := append([]string{"TESTFN_LEDGER=" + r.ledgerURL, "TESTFN_STORE=" + r.storeURL, "TESTFN_RUNS=" + r.runs}, r.env...)
	return lambdatest.Start(r.t, lambdatest.Function{Bootstrap: r.boot, Env: env, Timeout: timeout})
}

// runs reads the run log: each key's tokens, in the order the runs began.
func (r *rig) runsOf(key string) []string {
	f, err := os.Open(filepath.Join(r.runs, "runs.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	var toks []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[0] == key {
			toks = append(toks, fs[1])
		}
	}
	return toks
}

func (r *rig) status(bucket, key string) ledger.Status {
	r.t.Helper()
	rs, err := r.l.Get(context.Background(), bucket, key)
	if err != nil || len(rs) != 1 {
		r.t.Fatalf("ledger record of %s/%s: %+v %v", bucket, key, rs, err)
	}
	return rs[0].Status
}

// warm starts fn's process with a drain, again while the start outlasts the
// function's timeout (a cold start on a loaded machine: opening the ledger
// counts against the first invocation's time under the emulator).
func warm(t *testing.T, fn *lambdatest.Emulator) {
	t.Helper()
	for range 5 {
		body, status := call(t, fn, []byte(awslambda.DrainPayload))
		if status == 200 && !lambdatest.TimedOut(body) {
			return
		}
	}
	t.Fatal("the function never answered a drain within its timeout")
}

func call(t *testing.T, fn *lambdatest.Emulator, payload []byte) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body, status, err := fn.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	return body, status
}

// Through the real runtime and on every shared ledger: an SQS batch with
// poison and a FIFO batch mixing groups answer the golden partial-batch
// JSON; the same event sent to two sandboxes at once runs once; a handler
// Lambda's timeout kills mid-run is taken over after its lease with a
// higher token by the scheduled drain, and the killed run's token is then
// refused by fence; a crash mid-handler likewise.
func TestThroughEmulator(t *testing.T) {
	t.Parallel()
	for _, which := range ledgers {
		t.Run(which, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, which)
			a, b := r.function(5*time.Second), r.function(5*time.Second)
			warm(t, a)
			warm(t, b)

			// Partial batch responses, golden. In a sandbox with a long
			// timeout: the batch's work is checked processed after the
			// invocation, and an invocation near its timeout stops and
			// leaves its work pending for the next (under load a 5 s one
			// did: "fifo/a is pending after the invocation").
			long := r.function(time.Minute)
			warm(t, long)
			body, status := call(t, long, sqsBatch(
				sqsMsg{id: "m1", group: "g1", body: s3Body("fifo/a", "01")},
				sqsMsg{id: "m2", group: "g2", body: s3Body("fifo/c", "01")},
				sqsMsg{id: "m3", group: "g1", body: "poison"},
				sqsMsg{id: "m4", group: "g1", body: s3Body("fifo/b", "01")},
			))
			if want := `{"batchItemFailures":[{"itemIdentifier":"m3"},{"itemIdentifier":"m4"}]}`; status != 200 || string(body) != want {
				t.Fatalf("FIFO batch answered %d %s, want %s", status, body, want)
			}
			for _, k := range []string{"fifo/a", "fifo/c"} {
				if st := r.status("b", k); st != ledger.Processed {
					t.Errorf("%s is %s after the invocation, want processed", k, st)
				}
			}
			if rs, _ := r.l.Get(context.Background(), "b", "fifo/b"); len(rs) != 0 {
				t.Errorf("fifo/b, after a failed message of its group, was recorded: %+v", rs)
			}

			// The same event to two sandboxes at once: one run.
			payload := []byte(s3Body("slow/dup", "01"))
			var wg sync.WaitGroup
			for _, fn := range []*lambdatest.Emulator{a, b} {
				wg.Go(func() {
					if body, status := call(t, fn, payload); status != 200 || strings.Contains(string(body), "errorType") {
						t.Errorf("duplicate invoke answered %d %s", status, body)
					}
				})
			}
			wg.Wait()
			if toks := r.runsOf("slow/dup"); len(toks) != 1 {
				t.Errorf("an event delivered twice at once ran %d times (tokens %v)", len(toks), toks)
			}

			// A timeout mid-handler, then a crash mid-handler.
			for _, key := range []string{"hang/x", "crash/x"} {
				warm(t, a) // a fresh process after the last kill
				body, status = call(t, a, []byte(s3Body(key, "01")))
				switch key {
				case "hang/x":
					if !lambdatest.TimedOut(body) {
						t.Fatalf("%s answered %d %s, want a timeout", key, status, body)
					}
				case "crash/x":
					if status != 502 {
						t.Fatalf("%s answered %d %s, want a crash (502)", key, status, body)
					}
				}
				if st := r.status("b", key); st != ledger.Claimed {
					t.Fatalf("%s is %s after its process was killed, want claimed", key, st)
				}
				// The lease (at most the invocation's time) runs out; a drain
				// in the other sandbox takes the key over.
				deadline := time.Now().Add(60 * time.Second)
				for r.status("b", key) != ledger.Processed {
					if time.Now().After(deadline) {
						t.Fatalf("%s never taken over: %s, runs %v", key, r.status("b", key), r.runsOf(key))
					}
					time.Sleep(500 * time.Millisecond)
					out, _ := call(t, b, []byte(awslambda.DrainPayload))
					if os.Getenv("DBG") != "" {
						rs, _ := r.l.Get(context.Background(), "b", key)
						t.Logf("drain: %s; record %+v", out, rs)
					}
				}
				toks := r.runsOf(key)
				var first, second int64
				if len(toks) == 2 {
					first, _ = strconv.ParseInt(toks[0], 10, 64)
					second, _ = strconv.ParseInt(toks[1], 10, 64)
				}
				if len(toks) != 2 || first < 1 || second != first+1 {
					t.Fatalf("%s ran with tokens %v, want two runs, the second's token one above the first's", key, toks)
				}
				// The killed run's late write is refused.
				_, err := fence.PutBytes(context.Background(), r.s, "out/"+key, []byte("late"), first, nil)
				if !errors.Is(err, fence.ErrStale) {
					t.Errorf("a write with the killed run's token: %v, want fence.ErrStale", err)
				}
			}
		})
	}
}

// Every recorded fixture of another project, and MinIO's, reaches the
// handler through the real runtime, directly and in an SQS batch.
func TestFixturesThroughEmulator(t *testing.T) {
	t.Parallel()
	r := newRig(t, "objledger")
	fn := r.function(10 * time.Second)
	warm(t, fn)
	var files []string
	for _, pat := range []string{"aws-lambda-go/*.json", "powertools/*.json", "minio-webhook-*.json"} {
		fs, _ := filepath.Glob(filepath.Join("..", "..", "event", "testdata", pat))
		files = append(files, fs...)
	}
	if len(files) < 10 {
		t.Fatalf("fixtures: %v", files)
	}
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		evs, perr := event.Parse(body)
		for i, payload := range [][]byte{body, sqsBatch(sqsMsg{id: "m1", body: string(body)})} {
			out, status := call(t, fn, payload)
			if status != 200 || strings.Contains(string(out), "errorType") {
				t.Fatalf("%s (way %d) answered %d %s", file, i, status, out)
			}
			if i == 1 {
				want := `{"batchItemFailures":[]}`
				if perr != nil {
					want = `{"batchItemFailures":[{"itemIdentifier":"m1"}]}`
				}
				if string(out) != want {
					t.Errorf("%s in SQS answered %s, want %s", file, out, want)
				}
			}
		}
		for _, ev := range evs {
			if ev.Kind == event.Created || ev.Kind == event.Removed {
				if rs, err := r.l.Get(context.Background(), ev.Bucket, ev.Key); err != nil || len(rs) == 0 {
					t.Errorf("%s: %s/%s not recorded: %v", file, ev.Bucket, ev.Key, err)
				}
			}
		}
	}
	_ = eventtest.Created
	var sum awslambda.Summary
	out, _ := call(t, fn, []byte(awslambda.DrainPayload))
	if err := json.Unmarshal(out, &sum); err != nil || sum.Kind != "drain" {
		t.Errorf("drain answered %s: %v", out, err)
	}
}
