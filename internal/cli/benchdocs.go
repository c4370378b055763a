package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/durflag"
	"github.com/cairn-s3/cairn/objstore"
)

func benchDocsCmd(e *env) *cobra.Command {
	var storeURL, writersList string
	var duration time.Duration
	var procs, procWriters int
	cmd := &cobra.Command{
		Use:   "docs",
		Short: "Committed updates/s on one document: the naive CAS loop vs cairn's group commit",
		Long: `For each writer count, W goroutines increment one counter document for
--duration with the textbook loop (GET, modify, PUT If-Match, retry on 412) and
then with cairn (docstore.Update with group commit), each on a fresh key. Reports
committed updates per second, p99 update latency and the ratio. With --procs,
also runs that many OS processes of --proc-writers each, both ways. Every phase
checks that the counter equals the number of updates reported committed.`,
		Example: `  cairn bench docs --store 's3://bench?endpoint=http://127.0.0.1:9000&path_style=true' --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var counts []int
			for _, f := range strings.Split(writersList, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return usagef("--writers %q: a comma-separated list of positive numbers", writersList)
				}
				counts = append(counts, n)
			}
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			prefix := fmt.Sprintf("cairn-bench/docs-%d/", time.Now().UnixNano())
			var results []bench.Result
			for _, w := range counts {
				naive, err := runDocsPhase(ctx, s, "naive", prefix+fmt.Sprintf("naive-%d", w), w, duration)
				if err != nil {
					return err
				}
				cairn, err := runDocsPhase(ctx, s, "cairn", prefix+fmt.Sprintf("cairn-%d", w), w, duration)
				if err != nil {
					return err
				}
				results = append(results, docsResult(fmt.Sprintf("docs/%d-writers", w), naive, cairn, s, duration))
				e.log.Info("bench docs", "writers", w, "naive", naive.perSec(duration), "cairn", cairn.perSec(duration))
			}
			if procs > 0 {
				naive, err := runDocsProcs(ctx, storeURL, "naive", prefix+"procs-naive", procs, procWriters, duration)
				if err != nil {
					return err
				}
				cairn, err := runDocsProcs(ctx, storeURL, "cairn", prefix+"procs-cairn", procs, procWriters, duration)
				if err != nil {
					return err
				}
				if err := verifyCounter(ctx, s, "naive", prefix+"procs-naive", naive.count); err != nil {
					return err
				}
				if err := verifyCounter(ctx, s, "cairn", prefix+"procs-cairn", cairn.count); err != nil {
					return err
				}
				results = append(results, docsResult(fmt.Sprintf("docs/%d-processes-x-%d-writers", procs, procWriters), naive, cairn, s, duration))
			}
			cleanupPrefix(ctx, s, prefix)
			return bench.Print(e.stdout, e.json, results)
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "./cairn-data/bench", "store URL")
	cmd.Flags().StringVar(&writersList, "writers", "1,4,16,64", "writer counts to measure")
	durflag.Var(cmd.Flags(), &duration, "duration", 3*time.Second, "how long each phase runs")
	cmd.Flags().IntVar(&procs, "procs", 4, "OS processes for the multi-process phase (0 skips it)")
	cmd.Flags().IntVar(&procWriters, "proc-writers", 16, "writers in each process")
	return cmd
}

type phase struct {
	count int
	lat   bench.Latencies
	p99   time.Duration // for process phases: the worst process's p99
}

func (p phase) perSec(d time.Duration) float64 { return float64(p.count) / d.Seconds() }

func docsResult(name string, naive, cairn phase, s *objstore.Store, d time.Duration) bench.Result {
	r := bench.NewResult(name, "updates/s", naive.perSec(d), cairn.perSec(d))
	r.BaselineDesc, r.CairnDesc = "GET + PUT If-Match, retry on 412", "docstore.Update with group commit"
	r.BaselineP99, r.CairnP99 = naive.p99, cairn.p99
	if len(naive.lat) > 0 {
		r.BaselineP99, r.CairnP99 = naive.lat.Percentile(99), cairn.lat.Percentile(99)
	}
	r.Note = fmt.Sprintf("%s, %s per phase, counters verified", s, d)
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
	ds := docstore.Typed[int](docstore.New(s, nil))
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var p phase
	var firstErr error
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			var lat bench.Latencies
			for time.Now().Before(deadline) {
				t0 := time.Now()
				var err error
				if mode == "naive" {
					err = naiveIncrement(ctx, s, key)
				} else {
					_, _, err = ds.Update(ctx, key, func(v *int, _ docstore.Meta) error { *v++; return nil })
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			p.count += len(lat)
			p.lat = append(p.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return p, firstErr
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
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

type workerReport struct {
	Count int           `json:"count"`
	P99   time.Duration `json:"p99_ns"`
	Error string        `json:"error,omitempty"`
}

// runDocsProcs starts procs copies of this binary as workers, releases them
// together, and sums their reports.
func runDocsProcs(ctx context.Context, storeURL, mode, key string, procs, w int, d time.Duration) (phase, error) {
	self, err := os.Executable()
	if err != nil {
		return phase{}, err
	}
	type child struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var kids []child
	start := time.Now().Add(2 * time.Second)
	for range procs {
		cmd := exec.CommandContext(ctx, self, "bench", "docs-worker", "--store", storeURL, "--mode", mode, "--key", key,
			"--writers", strconv.Itoa(w), "--duration", d.String(), "--start", strconv.FormatInt(start.UnixNano(), 10))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return phase{}, err
		}
		if err := cmd.Start(); err != nil {
			return phase{}, err
		}
		kids = append(kids, child{cmd, bufio.NewScanner(out)})
	}
	var p phase
	for _, k := range kids {
		var rep workerReport
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
		p.p99 = max(p.p99, rep.P99)
	}
	return p, nil
}

func benchDocsWorkerCmd(e *env) *cobra.Command {
	var storeURL, mode, key string
	var writers int
	var duration time.Duration
	var startNs int64
	cmd := &cobra.Command{
		Use:    "docs-worker",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer s.Close()
			time.Sleep(time.Until(time.Unix(0, startNs)))
			p, err := docsWorkers(ctx, s, mode, key, writers, duration)
			rep := workerReport{Count: p.count, P99: p.lat.Percentile(99)}
			if err != nil {
				rep.Error = err.Error()
			}
			return e.writeJSON(rep)
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "")
	cmd.Flags().StringVar(&mode, "mode", "cairn", "")
	cmd.Flags().StringVar(&key, "key", "", "")
	cmd.Flags().IntVar(&writers, "writers", 16, "")
	durflag.Var(cmd.Flags(), &duration, "duration", 3*time.Second, "")
	cmd.Flags().Int64Var(&startNs, "start", 0, "")
	return cmd
}
