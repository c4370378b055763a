package bench_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench"
)

// The RSS bench's plumbing at a tiny size: it fills a ledger, runs the real
// cairn serve on it and on an empty one under load, and reports both; with
// Keep the filled ledgers stay and serve's copy goes. No figure is checked
// but that it was read.
func TestRSSPlumbing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench rss reads /proc/PID/status")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "cairn")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/cairn-s3/cairn/cmd/cairn").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	var phases []string
	results, err := bench.RSS(context.Background(), bench.RSSOptions{Cairn: bin, Sizes: []int{250}, Dir: dir, Keep: true,
		Duration: 1500 * time.Millisecond, Rate: 20, Views: 8, Progress: func(p string) { phases = append(phases, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want steady and peak: %+v", len(results), results)
	}
	for _, r := range results {
		if !strings.Contains(r.Name, "250 records") || r.Baseline <= 0 || r.Cairn <= 0 || r.Ratio <= 0 || !r.Lower {
			t.Errorf("result %+v: want the size named and both sides read", r)
		}
	}
	if len(phases) != 4 {
		t.Errorf("phases %q: want a fill and a serve for the baseline and the size", phases)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"ledger-0.db", "ledger-250.db"}) {
		t.Errorf("left in Dir: %q, want the two filled ledgers only", left)
	}
}
