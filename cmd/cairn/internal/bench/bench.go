// Package bench runs cairn's whole-system benchmarks (`cairn bench NAME`). Every
// benchmark measures a naive baseline and cairn in the same run, interleaved in
// rounds so machine noise hits both alike, and reports the ratio: absolute
// figures on shared machines are noise, ratios are not.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one line of a benchmark report. For throughputs Ratio is
// Cairn/Baseline (higher is better); for costs (Lower set) it is
// Cairn/Baseline too, and lower is better.
type Result struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Baseline float64 `json:"baseline"`
	Cairn    float64 `json:"cairn"`
	Ratio    float64 `json:"ratio"`
	// BaselineDesc and CairnDesc say what was measured on each side.
	BaselineDesc string `json:"baseline_desc,omitempty"`
	CairnDesc    string `json:"cairn_desc,omitempty"`
	// P99 latencies, where measured.
	BaselineP99 time.Duration `json:"baseline_p99_ns,omitempty"`
	CairnP99    time.Duration `json:"cairn_p99_ns,omitempty"`
	Lower       bool          `json:"lower_is_better,omitempty"`
	// PipelineCeiling, where measured (bench serve, no-op handler), is what
	// the same pipeline reaches on an in-memory ledger that keeps nothing, in
	// Unit, with its p99: Cairn/PipelineCeiling is the share the ledger
	// leaves, PipelineCeiling/Baseline the pipeline's.
	PipelineCeiling     float64       `json:"pipeline_ceiling,omitempty"`
	PipelineCeilingDesc string        `json:"pipeline_ceiling_desc,omitempty"`
	PipelineCeilingP99  time.Duration `json:"pipeline_ceiling_p99_ns,omitempty"`
	Note                string        `json:"note,omitempty"`
}

// NewResult fills Ratio.
func NewResult(name, unit string, baseline, cairn float64) Result {
	r := Result{Name: name, Unit: unit, Baseline: baseline, Cairn: cairn}
	if baseline > 0 {
		r.Ratio = cairn / baseline
	}
	return r
}

// Print writes results as JSON lines, or as a table for people.
func Print(w io.Writer, asJSON bool, results []Result) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range results {
		better := "higher is better"
		if r.Lower {
			better = "lower is better"
		}
		fmt.Fprintf(w, "%s\n  baseline (%s): %.1f %s\n  cairn    (%s): %.1f %s\n  ratio cairn/baseline: %.2f (%s)\n",
			r.Name, r.BaselineDesc, r.Baseline, r.Unit, r.CairnDesc, r.Cairn, r.Unit, r.Ratio, better)
		if r.BaselineP99 > 0 || r.CairnP99 > 0 {
			fmt.Fprintf(w, "  p99: baseline %s, cairn %s\n", r.BaselineP99.Round(time.Microsecond), r.CairnP99.Round(time.Microsecond))
		}
		if r.PipelineCeiling > 0 && r.Baseline > 0 {
			fmt.Fprintf(w, "  pipeline ceiling (%s): %.1f %s, p99 %s\n  ratio pipeline ceiling/baseline: %.2f; cairn/pipeline ceiling: %.2f\n",
				r.PipelineCeilingDesc, r.PipelineCeiling, r.Unit, r.PipelineCeilingP99.Round(time.Microsecond), r.PipelineCeiling/r.Baseline, r.Cairn/r.PipelineCeiling)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", r.Note)
		}
	}
	return nil
}

// Latencies collects durations and answers percentiles.
type Latencies []time.Duration

// Percentile returns the p-th percentile (0 < p <= 100).
func (l Latencies) Percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Total sums the durations.
func (l Latencies) Total() time.Duration {
	var t time.Duration
	for _, d := range l {
		t += d
	}
	return t
}

// PerSecond is how many operations per second len(l) operations taking Total imply.
func (l Latencies) PerSecond() float64 {
	if t := l.Total(); t > 0 {
		return float64(len(l)) / t.Seconds()
	}
	return 0
}

// ForEach calls fn(i) for every i in [0, n) from workers goroutines, in order
// of i as workers free up, and returns the first error (the rest stop taking
// work then) or ctx's error.
func ForEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
