package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/cmd/cairn/internal/demo"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// TestDemo runs cairn demo on embedded defaults: the naive consumer shows the
// faults, cairn shows none, and lost newest events are awaiting audit.
func TestDemo(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, "demo", "--json", "--writes", "600", "--keys", "120", "--seed", "7", "--lost", "0.03")
	if code != 0 {
		t.Fatalf("demo exit %d: %s %s", code, out, stderr)
	}
	var r demo.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if !r.InvariantOK || r.Cairn.DoubleProcessed != 0 || r.Cairn.StaleOverwrites != 0 || r.Cairn.Wrong != 0 {
		t.Fatalf("cairn broke an invariant: %+v", r.Cairn)
	}
	if r.Duplicates == 0 || r.Reordered == 0 || r.Lost == 0 {
		t.Fatalf("the demo injected no faults: %+v", r)
	}
	if r.Naive.DoubleProcessed != r.Duplicates || r.Naive.StaleOverwrites == 0 {
		t.Fatalf("the naive consumer should show the faults: %+v (duplicates %d)", r.Naive, r.Duplicates)
	}
	if r.Cairn.AwaitingAudit != 0 || r.Cairn.FoundByAudit < r.Naive.AwaitingAudit || r.Naive.AwaitingAudit == 0 {
		t.Fatalf("the audit must find what the lost events never announced: cairn %+v, naive missed %d", r.Cairn, r.Naive.AwaitingAudit)
	}
	// Text output on the same defaults.
	code, out, _ = run(t, "demo", "--writes", "200", "--keys", "50")
	if code != 0 || !strings.Contains(out, "double-processed") || !strings.Contains(out, "nothing missed") {
		t.Fatalf("demo text: exit %d\n%s", code, out)
	}
}

// TestDemoMinIOPostgres: the same against real services.
func TestDemoMinIOPostgres(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	_, url := testenv.NewBucket(t, ep)
	pg := testenv.PostgresSchema(t, testenv.PGExec)
	cmd := exec.Command(buildCairn(t), "demo", "--json", "--writes", "300", "--keys", "60", "--store", url, "--ledger", pg)
	cmd.Env = append(os.Environ(), ep.Env()...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r demo.Report
	if err != nil || json.Unmarshal(out, &r) != nil || !r.InvariantOK || r.Naive.DoubleProcessed == 0 {
		t.Fatalf("demo on MinIO + PostgreSQL: %v\n%s\n%s", err, out, stderr.String())
	}
}

// TestDemoPostgresRepeated runs cairn demo on a PostgreSQL ledger ten times
// (issue 15: batched completions and batched records deadlocked each other, a
// dropped completion waited out its 30 s lease and the handler ran again, in 6
// of 10 runs). No run may process a change twice, apply a stale one, miss
// one, or wait out a lease: the cairn side of a run takes a second or two, a
// lease 30 s.
func TestDemoPostgresRepeated(t *testing.T) {
	t.Parallel()
	const runs = 10
	failed := 0
	for i := range runs {
		pg := testenv.PostgresSchema(t, testenv.PGExec)
		code, out, stderr := run(t, "demo", "--json", "--writes", "400", "--keys", "60", "--seed", fmt.Sprint(i+1), "--ledger", pg)
		var r demo.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Errorf("run %d: exit %d: %v: %s %s", i, code, err, out, stderr)
			failed++
			continue
		}
		// Retried: a run that was not its work's first attempt; the demo's
		// handler never fails, so it is a lease that ran out before the
		// outcome was recorded (a lost completion), however fast the run.
		if code != 0 || !r.InvariantOK || r.Cairn.DoubleProcessed != 0 || r.Cairn.StaleOverwrites != 0 || r.Cairn.Wrong != 0 || r.Cairn.AwaitingAudit != 0 || r.Cairn.Retried != 0 {
			t.Errorf("run %d: exit %d, cairn double %d, stale %d, wrong %d, missed %d, retried %d (%.1fs): %s",
				i, code, r.Cairn.DoubleProcessed, r.Cairn.StaleOverwrites, r.Cairn.Wrong, r.Cairn.AwaitingAudit, r.Cairn.Retried, r.Cairn.Seconds, stderr)
			failed++
			continue
		}
		t.Logf("run %d: %d deliveries, cairn %d handler runs in %.2fs, 0 double, 0 stale, 0 missed",
			i, r.Deliveries, r.Cairn.HandlerRuns, r.Cairn.Seconds)
	}
	if failed > 0 {
		t.Fatalf("%d of %d demo runs on PostgreSQL failed", failed, runs)
	}
}

// TestDemoObjectLedger: the demo with the ledger in an object store, on the
// directory store and on MinIO (the ledger in a bucket of its own).
func TestDemoObjectLedger(t *testing.T) {
	t.Parallel()
	check := func(what string, out []byte) {
		t.Helper()
		var r demo.Report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v: %s", what, err, out)
		}
		if !r.InvariantOK || r.Cairn.DoubleProcessed != 0 || r.Cairn.StaleOverwrites != 0 || r.Cairn.AwaitingAudit != 0 || r.Naive.DoubleProcessed == 0 {
			t.Fatalf("%s: %+v", what, r)
		}
	}
	code, out, stderr := run(t, "demo", "--json", "--writes", "300", "--keys", "60", "--ledger", "file://"+filepath.ToSlash(t.TempDir()))
	if code != 0 {
		t.Fatalf("demo exit %d: %s %s", code, out, stderr)
	}
	check("directory-store ledger", []byte(out))

	ep := testenv.S3(t)
	_, storeURL := testenv.NewBucket(t, ep)
	_, ledgerBucket := testenv.NewBucket(t, ep)
	cmd := exec.Command(buildCairn(t), "demo", "--json", "--writes", "300", "--keys", "60", "--store", storeURL,
		"--ledger", strings.Replace(ledgerBucket, "?", "/ledger?", 1))
	cmd.Env = append(os.Environ(), ep.Env()...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	mout, err := cmd.Output()
	if err != nil {
		t.Fatalf("demo on MinIO with an S3 ledger: %v\n%s\n%s", err, mout, errOut.String())
	}
	check("S3 ledger on MinIO", mout)
}

// TestServeFlagsEnvConfig: settings come from flags, then CAIRN_* variables,
// then the YAML file; bad settings are usage errors that say what to do.
func TestServeFlagsEnvConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cairn.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		env    map[string]string
		config string
		args   []string
		hint   string
	}{
		{nil, "", []string{"serve"}, "a handler is required"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--handler-http", "http://x"}, "one of"},
		{nil, "", []string{"serve", "--handler-http", "ftp://x"}, "http://"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--listen", "0.0.0.0:0"}, "--webhook-token"},
		{map[string]string{"CAIRN_LISTEN": "0.0.0.0:0"}, "", []string{"serve", "--handler-exec", "true"}, "--webhook-token"},
		{nil, "handler-exec: 'true'\nlisten: 0.0.0.0:0\n", []string{"serve"}, "--webhook-token"},
		{nil, "handler-exec: 'true'\ncolour: red\n", []string{"serve"}, `unknown setting "colour"`},
		{nil, "handler-exec: [a, b]\n", []string{"serve"}, "not a list"},
		{map[string]string{"CAIRN_CONCURRENCY": "many"}, "", []string{"serve", "--handler-exec", "true"}, "CAIRN_CONCURRENCY"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--source", "ftp://x"}, "nats://"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--source", "https://sqs.eu-west-1.amazonaws.com/1/q"}, "nats://"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--sqs-queue-url", "sqs.example/q"}, "--sqs-queue-url"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--source", "nats://127.0.0.1:1"}, "stream= is required"},
		{nil, "", []string{"serve", "--handler-exec", "true", "--source", "kafka://h:1?topic=t&colour=red"}, "unknown parameter"},
	}
	for _, tc := range cases {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		args := tc.args
		if tc.config != "" {
			write(tc.config)
			args = append(args, "--config", cfg)
		}
		code, _, stderr := run(t, append(args, "--ledger", filepath.Join(dir, "l.db"))...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tc.hint) {
			t.Errorf("cairn %q (env %v, config %q): exit %d %q, want usage error mentioning %q", args, tc.env, tc.config, code, stderr, tc.hint)
		}
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
}
