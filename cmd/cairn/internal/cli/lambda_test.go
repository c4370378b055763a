package cli_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
)

// unreachableLedger is an object-store ledger nothing answers for: a command
// that opened it would fail on the connection, not on what it checks first.
const unreachableLedger = "s3://bkt/cairn-ledger-lambda?endpoint=http://127.0.0.1:1&path_style=true&region=us-east-1"

// A ledger that lives in one sandbox is refused before anything is opened
// or created, with a message that says why and what to use instead.
func TestLambdaRefusesLocalLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		ledger string // "" : no --ledger at all
		what   string
		path   string // what must not have been created
	}{
		{"", "the default (cairn-data/ledger.db) is a SQLite file", ""},
		{filepath.Join(dir, "bare.db"), "is a SQLite file", filepath.Join(dir, "bare.db")},
		{"sqlite://" + filepath.Join(dir, "url.db"), "is a SQLite file", filepath.Join(dir, "url.db")},
		{"SQLITE://" + filepath.Join(dir, "upper.db"), "is a SQLite file", filepath.Join(dir, "upper.db")},
		{"file://" + filepath.Join(dir, "objledger"), "is a local directory", filepath.Join(dir, "objledger")},
		{"mem://ledger", "is in memory", ""},
	} {
		args := []string{"lambda", "--handler-exec", "true"}
		if tc.ledger != "" {
			args = append(args, "--ledger", tc.ledger)
		}
		code, _, stderr := run(t, args...)
		if code != cli.ExitUsage {
			t.Errorf("ledger %q: exit %d, want %d (stderr %q)", tc.ledger, code, cli.ExitUsage, stderr)
		}
		for _, want := range []string{tc.what, "each sandbox has its own ephemeral disk", "would not be shared", "run twice", "CAIRN_LEDGER", "s3://BUCKET/PREFIX", "postgres://", "dynamodb://"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("ledger %q: stderr %q does not say %q", tc.ledger, stderr, want)
			}
		}
		if tc.path != "" {
			if _, err := os.Stat(tc.path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("ledger %q: %s was created (%v)", tc.ledger, tc.path, err)
			}
		}
	}
}

// Outside Lambda the command says it is not inside Lambda and what to run
// instead, before it opens the ledger (which is unreachable here).
func TestLambdaOutsideLambda(t *testing.T) {
	t.Parallel()
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
		t.Skip("this test runs inside Lambda")
	}
	for _, h := range [][]string{{"--handler-exec", "true"}, {"--handler-http", "http://127.0.0.1:1/h"}} {
		code, _, stderr := run(t, append([]string{"lambda", "--ledger", unreachableLedger}, h...)...)
		if code != cli.ExitRuntime || !strings.Contains(stderr, "AWS_LAMBDA_RUNTIME_API is not set") || !strings.Contains(stderr, "cairn serve") {
			t.Errorf("%v outside Lambda: exit %d %q, want exit 1 saying AWS_LAMBDA_RUNTIME_API is not set and naming cairn serve", h, code, stderr)
		}
	}
}

// Settings that cannot work are usage errors that say what to give.
func TestLambdaUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{[]string{"--ledger", unreachableLedger}, "a handler is required: --handler-exec 'CMD ARGS' or --handler-http URL"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--handler-http", "http://x/"}, "give one of --handler-exec and --handler-http"},
		{[]string{"--ledger", unreachableLedger, "--handler-http", "ftp://x/"}, "want an http:// or https:// URL"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--poison", "drop"}, `--poison "drop": give dlq`},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--lease", "1s"}, "--lease 1s is too short"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--stop-before", "-1s"}, "--stop-before -1s is negative"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--concurrency", "0"}, "must be positive"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--audit"}, "--audit needs --store URL"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "--audit", "--store", t.TempDir()}, "needs --bucket NAME"},
		{[]string{"--ledger", unreachableLedger, "--handler-exec", "true", "extra"}, "unknown command"},
	} {
		code, _, stderr := run(t, append([]string{"lambda"}, tc.args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tc.hint) {
			t.Errorf("cairn lambda %q: exit %d %q, want exit 2 saying %q", tc.args, code, stderr, tc.hint)
		}
	}
}

// A binary named bootstrap runs cairn lambda, with the arguments it is given.
func TestArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv, want []string
	}{
		{[]string{"/usr/bin/cairn", "serve", "--x"}, []string{"serve", "--x"}},
		{[]string{"cairn"}, []string{}},
		{[]string{"/var/task/bootstrap"}, []string{"lambda"}},
		{[]string{"./bootstrap", "--log-level", "debug"}, []string{"lambda", "--log-level", "debug"}},
		{[]string{"bootstrap", "lambda", "--concurrency", "2"}, []string{"lambda", "--concurrency", "2"}},
		{[]string{"/x/bootstrap.sh", "version"}, []string{"version"}},
		{nil, nil},
	} {
		if got := cli.Args(tc.argv); !slices.Equal(got, tc.want) {
			t.Errorf("Args(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

// buildBootstrap is the real cairn binary copied as a Lambda custom
// runtime's bootstrap, in a directory of its own.
func buildBootstrap(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(buildCairn(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), cli.BootstrapName)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The cairn binary deployed as bootstrap runs cairn lambda with no
// arguments, configured by its environment alone, as Lambda starts it.
func TestBootstrapBinary(t *testing.T) {
	t.Parallel()
	bin := buildBootstrap(t)
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "CAIRN_") || strings.HasPrefix(kv, "AWS_LAMBDA_RUNTIME_API=")
	})
	for _, tc := range []struct {
		env  []string
		code int
		hint string
	}{
		{[]string{"CAIRN_HANDLER_EXEC=true"}, cli.ExitUsage, "the default (cairn-data/ledger.db) is a SQLite file"},
		{[]string{"CAIRN_LEDGER=" + unreachableLedger}, cli.ExitUsage, "a handler is required"},
		{[]string{"CAIRN_HANDLER_EXEC=true", "CAIRN_LEDGER=" + unreachableLedger, "CAIRN_CONCURRENCY=none"}, cli.ExitUsage, "CAIRN_CONCURRENCY"},
		{[]string{"CAIRN_HANDLER_EXEC=true", "CAIRN_LEDGER=" + unreachableLedger}, cli.ExitRuntime, "AWS_LAMBDA_RUNTIME_API is not set"},
	} {
		cmd := exec.Command(bin)
		cmd.Dir = t.TempDir()
		cmd.Env = append(slices.Clone(base), tc.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stderr.String(), tc.hint) {
			t.Errorf("bootstrap with %q: exit %d %q, want %d saying %q", tc.env, code, stderr.String(), tc.code, tc.hint)
		}
		if ents, _ := os.ReadDir(cmd.Dir); len(ents) != 0 {
			t.Errorf("bootstrap with %q left %d files in its directory", tc.env, len(ents))
		}
	}
}
