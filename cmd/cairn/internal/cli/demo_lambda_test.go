package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/bench"
	"github.com/cairn-s3/cairn/internal/testing/lambdatest"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// cairn demo --lambda, end to end: the cairn binary runs the demo, whose
// sandboxes (the real Runtime Interface Emulator) run the same binary as
// cairn lambda; every check passes, and one sandbox was killed mid-handler by
// its timeout and its late write refused.
func TestDemoLambdaEndToEnd(t *testing.T) {
	t.Parallel()
	rie := lambdatest.RIE(t)
	bin := buildCairn(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--lambda", "--rie", rie, "--writes", "400", "--keys", "80", "--seed", "7", "--dir", dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cairn demo --lambda: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cairn: every change processed once, in order per key; nothing stale, nothing double, nothing missed.",
		"1 killed mid-handler by their timeout",
		"1 stale write refused",
		"invocations (",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
}

// cairn bench lambda through the real emulator on the object-store ledger in
// MinIO: one JSON line per figure, each with both sides measured in the run
// and its ratio; the Powertools-style guard makes its two requests per event
// on the same bucket, and cairn's requests are counted (never zero: the
// bypass, which makes none, is the baseline of the other lines only).
func TestBenchLambdaPrintsRatios(t *testing.T) {
	t.Parallel()
	rie := lambdatest.RIE(t)
	ep := testenv.S3(t)
	_, storeURL := testenv.NewBucket(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildCairn(t), "bench", "lambda", "--json", "--rie", rie, "--store", storeURL,
		"--sandboxes", "2", "--invocations", "3", "--rounds", "1")
	cmd.Env = append(os.Environ(), ep.Env()...)
	// At the timeout, SIGTERM: the command stops its sandboxes and removes
	// its directory (SIGKILL left both).
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cairn bench lambda: %v\n%s\n%s", err, out, stderr.String())
	}
	seen := map[string]bench.Result{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r bench.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a line that is no result: %q: %v", line, err)
		}
		if r.Baseline <= 0 || r.Cairn <= 0 || r.Ratio <= 0 {
			t.Errorf("%s: baseline %v, cairn %v, ratio %v: a side was not measured", r.Name, r.Baseline, r.Cairn, r.Ratio)
		}
		seen[r.Unit] = r
	}
	for _, unit := range []string{"invocations/s", "ms", "requests/1000 events"} {
		if _, ok := seen[unit]; !ok {
			t.Errorf("no %s figure in:\n%s", unit, out)
		}
	}
	if r := seen["requests/1000 events"]; r.Baseline < 1990 || r.Baseline > 2100 {
		t.Errorf("the Powertools-style guard made %v requests per 1,000 events, want 2,000 (two per event)", r.Baseline)
	}
}
