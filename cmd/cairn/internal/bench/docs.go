package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
)

// DocsOptions configures Docs. Store is required; zero fields take the
// defaults.
type DocsOptions struct {
	// Store holds the counter documents (under cairn-bench/docs-…/, deleted
	// after).
	Store *objstore.Store
	// StoreURL is the store's URL, passed to the worker processes.
	StoreURL string
	// Writers are the writer counts measured in this process (default 1,4,16,64).
	Writers []int
	// Duration is how long each phase runs (default 3s).
	Duration time.Duration
	// Processes are the multi-process phases, one row each: Procs OS
	// processes of Writers writers on one document (default: none; the
	// command's default is 4×16 and 64×1, the shape Lambda invocations
	// give).
	Processes []ProcessShape
	// WorkerCommand is the argv prefix that runs one worker process; Docs
	// appends --store, --mode, --key, --writers, --duration and --start, and
	// the worker passes them to DocsWorker and prints its WorkerReport as one
	// JSON line. Default: this executable with "bench docs-worker".
	WorkerCommand []string
	// Log gets a line per writer count (default: none).
	Log *slog.Logger
}

// ProcessShape is one multi-process phase of Docs: Procs processes of
// Writers writers each.
type ProcessShape struct {
	Procs, Writers int
}

// Docs measures committed updates per second on one counter document, for
// each writer count: the textbook loop (GET, modify, PUT If-Match, retry on
// 412) against docstore.Update with group commit, each on a fresh key. Every
// phase checks that the counter equals the number of updates reported
// committed.
func Docs(ctx context.Context, opts DocsOptions) ([]Result, error) {
	s := opts.Store
	counts := opts.Writers
	if len(counts) == 0 {
		counts = []int{1, 4, 16, 64}
	}
	duration := opts.Duration
	if duration <= 0 {
		duration = 3 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix := fmt.Sprintf("cairn-bench/docs-%d/", time.Now().UnixNano())
	var results []Result
	for _, w := range counts {
		naive, err := runDocsPhase(ctx, s, "naive", prefix+fmt.Sprintf("naive-%d", w), w, duration)
		if err != nil {
			return nil, err
		}
		cairn, err := runDocsPhase(ctx, s, "cairn", prefix+fmt.Sprintf("cairn-%d", w), w, duration)
		if err != nil {
			return nil, err
		}
		results = append(results, docsResult(fmt.Sprintf("docs/%d-writers", w), naive, cairn, s, duration))
		log.Info("bench docs", "writers", w, "naive", naive.perSec(duration), "cairn", cairn.perSec(duration))
	}
	for _, shape := range opts.Processes {
		if shape.Procs <= 0 || shape.Writers <= 0 {
			return nil, fmt.Errorf("bench docs: %d processes × %d writers: both must be positive", shape.Procs, shape.Writers)
		}
		argv := opts.WorkerCommand
		if len(argv) == 0 {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			argv = []string{self, "bench", "docs-worker"}
		}
		name := fmt.Sprintf("%d-processes-x-%d-writers", shape.Procs, shape.Writers)
		naive, err := runDocsProcs(ctx, argv, opts.StoreURL, "naive", prefix+"naive-"+name, shape.Procs, shape.Writers, duration)
		if err != nil {
			return nil, err
		}
		cairn, err := runDocsProcs(ctx, argv, opts.StoreURL, "cairn", prefix+"cairn-"+name, shape.Procs, shape.Writers, duration)
		if err != nil {
			return nil, err
		}
		if err := verifyCounter(ctx, s, "naive", prefix+"naive-"+name, naive.count); err != nil {
			return nil, err
		}
		if err := verifyCounter(ctx, s, "cairn", prefix+"cairn-"+name, cairn.count); err != nil {
			return nil, err
		}
		r := docsResult("docs/"+name, naive, cairn, s, duration)
		ceil, err := storeAlone(ctx, s, prefix+"alone-"+name, shape.Procs, duration)
		if err != nil {
			return nil, err
		}
		r.Note += "; " + ceil.String()
		results = append(results, r)
		log.Info("bench docs", "processes", shape.Procs, "writers", shape.Writers, "naive", naive.perSec(duration), "cairn", cairn.perSec(duration))
	}
	cleanupPrefix(ctx, s, prefix)
	return results, nil
}

type phase struct {
	count int
	// writes and redrives: cairn's conditional writes sent and 412s taken
	// (docstore.Stats; the naive loop's are not counted)
	writes, redrives, retries int
	lat                       Latencies // every committed update's, in every process
}

func (p phase) perSec(d time.Duration) float64 { return float64(p.count) / d.Seconds() }

func docsResult(name string, naive, cairn phase, s *objstore.Store, d time.Duration) Result {
	r := NewResult(name, "updates/s", naive.perSec(d), cairn.perSec(d))
	r.BaselineDesc, r.CairnDesc = "GET + PUT If-Match, retry on 412", "docstore.Update with group commit"
	r.BaselineP99, r.CairnP99 = naive.lat.Percentile(99), cairn.lat.Percentile(99)
	r.Note = fmt.Sprintf("%s, %s per phase, counters verified", s, d)
	if cairn.writes > 0 {
		r.Note += fmt.Sprintf("; cairn: %.1f updates per conditional write, %.2f 412s and %.2f 409s or transient failures per write",
			float64(cairn.count)/float64(cairn.writes), float64(cairn.redrives)/float64(cairn.writes), float64(cairn.retries)/float64(cairn.writes))
	}
	return r
}

// naiveIncrement is the textbook loop, kept here as the baseline.
func naiveIncrement(ctx context.Context, s *objstore.Store, key string) error {
	for {
		data, info, err := s.GetBytes(ctx, key)
		cond, err := objstore.Replacing(info, err)
		if err != nil {
			return err
		}
		n := 0
		if !cond.Absent {
			if n, err = strconv.Atoi(string(data)); err != nil {
				return err
			}
		}
		_, err = s.PutBytes(ctx, key, []byte(strconv.Itoa(n+1)), &objstore.PutOptions{If: cond})
		if err == nil {
			return nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) && !errors.Is(err, objstore.ErrConflict) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// runDocsPhase runs w writers for d and returns committed updates.
func runDocsPhase(ctx context.Context, s *objstore.Store, mode, key string, w int, d time.Duration) (phase, error) {
	p, err := docsWorkers(ctx, s, mode, key, w, d)
	if err != nil {
		return p, err
	}
	return p, verifyCounter(ctx, s, mode, key, p.count)
}

func docsWorkers(ctx context.Context, s *objstore.Store, mode, key string, w int, d time.Duration) (phase, error) {
	store := docstore.New(s, nil)
	ds := docstore.Typed[int](store)
	lat, err := timedWriters(w, d, func(int, int) error {
		if mode == "naive" {
			return naiveIncrement(ctx, s, key)
		}
		_, _, err := ds.Update(ctx, key, func(v *int, _ docstore.Meta) error { *v++; return nil })
		return err
	})
	st := store.Stats()
	p := phase{count: len(lat), lat: lat, writes: st.Writes, redrives: st.Redrives, retries: st.Retries}
	return p, err
}

// timedWriters runs op in a loop in w goroutines for d (op gets the
// goroutine's number and its own count of calls) and returns every call's
// latency. A goroutine stops at its first error; the first error is
// returned.
func timedWriters(w int, d time.Duration, op func(g, i int) error) (Latencies, error) {
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var all Latencies
	var first error
	var wg sync.WaitGroup
	for g := range w {
		wg.Go(func() {
			var lat Latencies
			for i := 0; time.Now().Before(deadline); i++ {
				t0 := time.Now()
				if err := op(g, i); err != nil {
					mu.Lock()
					first = firstErr(first, err)
					mu.Unlock()
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, first
}

func verifyCounter(ctx context.Context, s *objstore.Store, mode, key string, want int) error {
	var got int
	if mode == "naive" {
		data, _, err := s.GetBytes(ctx, key)
		if err != nil {
			return err
		}
		got, _ = strconv.Atoi(string(data))
	} else {
		v, _, err := docstore.Typed[int](docstore.New(s, nil)).Load(ctx, key)
		if err != nil {
			return err
		}
		got = v
	}
	if got != want {
		return fmt.Errorf("bench %s: counter %s holds %d but %d updates were reported committed", mode, key, got, want)
	}
	return nil
}

// WorkerReport is what one docs worker process prints, as one JSON line.
type WorkerReport struct {
	Count int `json:"count"`
	// Latencies are every committed update's, so the parent takes the
	// percentile over all processes' updates (the worst process's p99 is
	// a different, larger figure: with one writer a process, its slowest
	// update).
	Latencies Latencies `json:"latencies_ns"`
	// Writes and Redrives: the conditional writes cairn sent and the 412s
	// it took (zero for the naive loop).
	Writes   int    `json:"writes,omitempty"`
	Redrives int    `json:"redrives,omitempty"`
	Retries  int    `json:"retries,omitempty"`
	Error    string `json:"error,omitempty"`
}

// DocsWorkerOptions configures DocsWorker: what a worker process was given
// on its command line by Docs.
type DocsWorkerOptions struct {
	// Mode is "naive" or "cairn".
	Mode string
	// Key is the counter document.
	Key string
	// Writers is how many goroutines update it.
	Writers int
	// Duration is how long they run, from Start.
	Duration time.Duration
	// Start is when to begin (all workers begin together).
	Start time.Time
}

// DocsWorker is one worker process of the Docs multi-process phase: it
// learns the store's capabilities (the saved probe verdict: a process's
// one-time cost, not an update's), waits for Start, runs Writers writers on
// Key for Duration, and reports.
func DocsWorker(ctx context.Context, s *objstore.Store, opts DocsWorkerOptions) WorkerReport {
	if _, err := s.Capabilities(ctx); err != nil {
		return WorkerReport{Error: err.Error()}
	}
	time.Sleep(time.Until(opts.Start))
	p, err := docsWorkers(ctx, s, opts.Mode, opts.Key, opts.Writers, opts.Duration)
	rep := WorkerReport{Count: p.count, Latencies: p.lat, Writes: p.writes, Redrives: p.redrives, Retries: p.retries}
	if err != nil {
		rep.Error = err.Error()
	}
	return rep
}

// runDocsProcs starts procs worker processes, releases them together, and
// sums their reports.
func runDocsProcs(ctx context.Context, argv []string, storeURL, mode, key string, procs, w int, d time.Duration) (phase, error) {
	type child struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var kids []child
	start := time.Now().Add(2 * time.Second)
	for range procs {
		args := append(argv[1:len(argv):len(argv)], "--store", storeURL, "--mode", mode, "--key", key,
			"--writers", strconv.Itoa(w), "--duration", d.String(), "--start", strconv.FormatInt(start.UnixNano(), 10))
		cmd := exec.CommandContext(ctx, argv[0], args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return phase{}, err
		}
		if err := cmd.Start(); err != nil {
			return phase{}, err
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 64<<20) // a report holds every update's latency
		kids = append(kids, child{cmd, sc})
	}
	var p phase
	for _, k := range kids {
		var rep WorkerReport
		if k.out.Scan() {
			_ = json.Unmarshal(k.out.Bytes(), &rep)
		}
		if err := k.cmd.Wait(); err != nil && rep.Error == "" {
			rep.Error = err.Error()
		}
		if rep.Error != "" {
			return p, fmt.Errorf("bench worker: %s", rep.Error)
		}
		p.count += rep.Count
		p.lat = append(p.lat, rep.Latencies...)
		p.writes += rep.Writes
		p.redrives += rep.Redrives
		p.retries += rep.Retries
	}
	return p, nil
}

// ceiling is what the store itself does for the writers of one
// multi-process phase, with no document logic: the bound every design that
// keeps the document in that store meets.
type ceiling struct {
	conc int
	// puts: unconditional PUTs of one key by conc writers at once (the
	// key's write rate; cairn sends at most one write a process), and their
	// p99.
	puts   float64
	putP99 time.Duration
	// creates: If-None-Match PUTs of new keys by as many writers (what
	// handing updates over as objects of their own would cost at least).
	creates float64
}

func (c ceiling) String() string {
	return fmt.Sprintf("the store alone, %d writers at once: %.0f PUTs/s of one key (p99 %s), %.0f creates/s of new keys",
		c.conc, c.puts, c.putP99.Round(100*time.Microsecond), c.creates)
}

// storeAlone measures the ceiling for conc writers, d for each half.
func storeAlone(ctx context.Context, s *objstore.Store, prefix string, conc int, d time.Duration) (ceiling, error) {
	c := ceiling{conc: conc}
	run := func(op func(w, i int) error) (float64, Latencies, error) {
		lat, err := timedWriters(conc, d, op)
		return float64(len(lat)) / d.Seconds(), lat, err
	}
	body := []byte(`{"n":1}`)
	puts, lat, err := run(func(int, int) error {
		_, err := s.PutBytes(ctx, prefix+"/one", body, nil)
		return err
	})
	if err != nil {
		return c, err
	}
	c.puts, c.putP99 = puts, lat.Percentile(99)
	c.creates, _, err = run(func(w, i int) error {
		_, err := s.PutBytes(ctx, fmt.Sprintf("%s/new/%d-%d", prefix, w, i), body, &objstore.PutOptions{If: objstore.IfAbsent()})
		return err
	})
	return c, err
}
