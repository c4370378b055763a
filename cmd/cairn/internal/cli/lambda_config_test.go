package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/awslambda"
	"github.com/cairn-s3/cairn/ledger"
)

// A Lambda function is configured by its environment (and a config file it
// names): every CAIRN_* variable reaches the Function's options, flags win
// over the environment, the environment over the file. Not parallel: it sets
// the process's environment and replaces lambdaRun.
func TestLambdaConfigFromEnvironment(t *testing.T) {
	var got *lambdaSetup
	var debug bool
	lambdaRun = func(ctx context.Context, log *slog.Logger, s *lambdaSetup) error {
		got, debug = s, log.Enabled(ctx, slog.LevelDebug)
		return nil
	}
	t.Cleanup(func() { lambdaRun = runLambda })
	tmpState := filepath.Join(os.TempDir(), "cairn", "handlers")
	const ledgerURL = "s3://events/cairn-ledger-fn"
	defaults := func(mod func(o *awslambda.Options)) awslambda.Options {
		o := awslambda.Options{
			Pipeline:  intake.Options{Concurrency: intake.DefaultConcurrency, OwnPrefixes: map[string][]string{"events": {"cairn-ledger-fn/"}}},
			Poison:    awslambda.PoisonDLQ,
			Retention: 30 * 24 * time.Hour,
		}
		if mod != nil {
			mod(&o)
		}
		return o
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cairn.yaml")
	if err := os.WriteFile(cfg, []byte("ledger: postgres://cairn@db.internal/cairn\nhandler-http: https://handler.internal/h\nconcurrency: 3\npoison: ledger\nlog-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		ledger   string
		maxTries int
		every    bool
		handler  string
		state    string
		options  awslambda.Options
		audit    *lambdaAudit
		debug    bool
	}{
		{
			name:     "the least: a ledger and an exec handler",
			env:      map[string]string{"CAIRN_LEDGER": ledgerURL, "CAIRN_HANDLER_EXEC": "./handle.sh"},
			ledger:   ledgerURL,
			maxTries: 5,
			handler:  "exec /bin/sh -c ./handle.sh",
			state:    tmpState,
			options:  defaults(nil),
		},
		{
			name: "every setting",
			env: map[string]string{
				"CAIRN_LEDGER": ledgerURL, "CAIRN_HANDLER_HTTP": "https://h.example/run", "CAIRN_CONCURRENCY": "4",
				"CAIRN_LEASE": "10s", "CAIRN_HANDLER_TIMEOUT": "20s", "CAIRN_STOP_BEFORE": "2s",
				"CAIRN_MAX_ATTEMPTS": "3", "CAIRN_EVERY_VERSION": "true", "CAIRN_POISON": "ledger", "CAIRN_RETENTION": "7d",
				"CAIRN_STORE": "s3://events/incoming", "CAIRN_AUDIT": "true", "CAIRN_AUDIT_GRACE": "5m",
				"CAIRN_PROCESS_OWN_OBJECTS": "true", "CAIRN_LOG_LEVEL": "debug",
			},
			ledger:   ledgerURL,
			maxTries: 3,
			every:    true,
			handler:  "http https://h.example/run",
			options: awslambda.Options{
				Pipeline: intake.Options{Concurrency: 4, Lease: 10 * time.Second, Timeout: 20 * time.Second,
					ProcessOwnObjects: true, OwnPrefixes: map[string][]string{
						"events": {"cairn-ledger-fn/", "incoming/cairn-probe/", "incoming/cairn-locks/", "incoming/cairn-journal/", "incoming/cairn-ledger/"}}},
				StopBefore: 2 * time.Second,
				Poison:     awslambda.PoisonLedger,
				Retention:  7 * 24 * time.Hour,
			},
			audit: &lambdaAudit{storeURL: "s3://events/incoming", bucket: "events", options: audit.Options{Grace: 5 * time.Minute, Horizon: 7 * 24 * time.Hour}},
			debug: true,
		},
		{
			name:     "an audit of a store that is not s3 names its bucket; no retention: no horizon",
			env:      map[string]string{"CAIRN_LEDGER": ledgerURL, "CAIRN_HANDLER_EXEC": "h", "CAIRN_STORE": dir, "CAIRN_BUCKET": "events", "CAIRN_AUDIT": "1", "CAIRN_RETENTION": "0", "CAIRN_POISON": "DLQ", "CAIRN_HANDLER_STATE": "/tmp/mine"},
			ledger:   ledgerURL,
			maxTries: 5,
			handler:  "exec /bin/sh -c h",
			state:    "/tmp/mine",
			options:  defaults(func(o *awslambda.Options) { o.Retention = 0 }),
			audit:    &lambdaAudit{storeURL: dir, bucket: "events", options: audit.Options{Grace: 15 * time.Minute, Horizon: -1}},
		},
		{
			name:     "a config file named by CAIRN_CONFIG, under the environment",
			env:      map[string]string{"CAIRN_CONFIG": cfg, "CAIRN_CONCURRENCY": "8"},
			ledger:   "postgres://cairn@db.internal/cairn",
			maxTries: 5,
			handler:  "http https://handler.internal/h",
			options: awslambda.Options{Pipeline: intake.Options{Concurrency: 8, OwnPrefixes: map[string][]string{}},
				Poison: awslambda.PoisonLedger, Retention: 30 * 24 * time.Hour},
			debug: true,
		},
		{
			name:     "flags over the environment",
			env:      map[string]string{"CAIRN_LEDGER": "dynamodb://other", "CAIRN_HANDLER_EXEC": "./handle.sh", "CAIRN_CONCURRENCY": "2"},
			args:     []string{"--ledger", ledgerURL, "--concurrency", "16"},
			ledger:   ledgerURL,
			maxTries: 5,
			handler:  "exec /bin/sh -c ./handle.sh",
			state:    tmpState,
			options:  defaults(nil),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range lambdaEnvNames(t) {
				if _, ok := os.LookupEnv(name); ok {
					t.Setenv(name, "") // restored after the test
					os.Unsetenv(name)
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got = nil
			if code := Main(context.Background(), append([]string{"lambda"}, tc.args...), strings.NewReader(""), io.Discard, io.Discard); code != 0 || got == nil {
				t.Fatalf("exit %d, setup %v", code, got)
			}
			if got.ledgerURL != tc.ledger || !reflect.DeepEqual(got.ledger, ledger.Options{MaxAttempts: tc.maxTries, EveryVersion: tc.every}) {
				t.Errorf("ledger %q %+v, want %q with %d attempts, every version %v", got.ledgerURL, got.ledger, tc.ledger, tc.maxTries, tc.every)
			}
			if h := describeHandler(got.handler); h != tc.handler {
				t.Errorf("handler %q, want %q", h, tc.handler)
			}
			if got.stateDir != tc.state {
				t.Errorf("handler state %q, want %q", got.stateDir, tc.state)
			}
			if !reflect.DeepEqual(got.options, tc.options) {
				t.Errorf("options\n got %+v\nwant %+v", got.options, tc.options)
			}
			if !reflect.DeepEqual(got.audit, tc.audit) {
				t.Errorf("audit %+v, want %+v", got.audit, tc.audit)
			}
			if debug != tc.debug {
				t.Errorf("debug logging %v, want %v", debug, tc.debug)
			}
		})
	}
}

// lambdaEnvNames are the variables that configure cairn lambda.
func lambdaEnvNames(t *testing.T) []string {
	t.Helper()
	names := []string{envName("log-level"), envName("json")}
	cmd := lambdaCmd(&env{})
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, envName(f.Name)) })
	for _, name := range []string{"ledger", "handler-exec", "handler-http", "concurrency", "lease", "handler-timeout", "stop-before",
		"max-attempts", "every-version", "poison", "retention", "store", "bucket", "audit", "audit-grace", "handler-state", "process-own-objects"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Fatalf("cairn lambda has no --%s", name)
		}
	}
	return names
}

func describeHandler(h intake.Handler) string {
	switch h := h.(type) {
	case *intake.ExecHandler:
		return "exec " + strings.Join(h.Argv, " ")
	case *intake.HTTPHandler:
		return "http " + h.URL
	}
	return "?"
}
