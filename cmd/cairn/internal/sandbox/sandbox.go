// Package sandbox runs sandboxes of one AWS Lambda function on this machine,
// for `cairn demo --lambda` and `cairn bench lambda`: each is AWS's Lambda
// Runtime Interface Emulator on loopback running a custom-runtime bootstrap
// (the cairn binary itself, as `cairn lambda`), configured by environment as
// Lambda configures a function.
//
// The emulator takes one invoke at a time (a second one sent while one runs
// crashes it), so Invoke queues the calls of one Sandbox; invocations that
// run at the same time, as Lambda runs them in separate sandboxes, need
// several Sandboxes. A function that runs past its timeout is killed
// (SIGKILL of its process group) and answered "Task timed out after …"; the
// next invoke starts a fresh process. Freeze pauses a sandbox's running
// process (SIGSTOP), as a handler that ignores its deadline holds it, so
// that its timeout kills it mid-run.
//
// The emulator is built from the Go module proxy by
// `go run ./internal/testing/cmd/services install` (FindRIE says so when it
// is missing). Sandboxes die with the process that started them.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/services"
)

// InvokePath is the emulator's invoke endpoint.
const InvokePath = "/2015-03-31/functions/function/invocations"

// InstallCommand builds the emulator into the cache.
const InstallCommand = "go run ./internal/testing/cmd/services install"

// FindRIE returns the emulator binary: path if given, else
// $CAIRN_TEST_LAMBDA_RIE or the cache's (services.LambdaRIEBinary). Its error
// says how to get one.
func FindRIE(path string) (string, error) {
	if path != "" {
		if st, err := os.Stat(path); err != nil || st.IsDir() {
			return "", fmt.Errorf("--rie %s: no such emulator binary; build AWS's Lambda Runtime Interface Emulator with `%s` (in cairn's source tree) or drop --rie for the one it installs (%s)", path, InstallCommand, defaultRIE())
		}
		return path, nil
	}
	bin, ok := services.LambdaRIEBinary()
	if !ok {
		return "", fmt.Errorf("AWS's Lambda Runtime Interface Emulator is not installed (looked for %s): build it with `%s` in cairn's source tree (a few seconds; or `GOBIN=DIR go install %s`) and give its path with --rie", bin, InstallCommand, services.LambdaRIEModule)
	}
	return bin, nil
}

func defaultRIE() string {
	bin, _ := services.LambdaRIEBinary()
	return bin
}

// Options configure a Sandbox.
type Options struct {
	// RIE is the emulator binary (FindRIE). Required.
	RIE string
	// Bootstrap is the function's executable and Args its arguments.
	// Required.
	Bootstrap string
	Args      []string
	// Dir is the sandbox's own directory (its working directory, TMPDIR
	// and the emulator's log); created if missing. Required.
	Dir string
	// Env adds KEY=value variables to the function's environment (see
	// Start).
	Env []string
	// Timeout is the function's timeout, whole seconds. Default 5s.
	Timeout time.Duration
	// Name is AWS_LAMBDA_FUNCTION_NAME. Default "cairn".
	Name string
}

// Sandbox is a running emulator with its function.
type Sandbox struct {
	srv     *services.Server
	dir     string
	timeout time.Duration
	client  *http.Client
	turn    chan struct{}
}

// passed are the variables of this process a function gets: its AWS
// credentials and settings (a ledger or store on S3 or DynamoDB needs them).
var passed = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
	"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED", "AWS_ENDPOINT_URL",
	"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_DYNAMODB", "PGPASSWORD", "PGUSER", "SSL_CERT_FILE"}

// Start starts a sandbox and waits until its emulator answers; the function
// itself starts on the first invoke. The function's environment is PATH and
// HOME, the AWS variables of this process (credentials, endpoints),
// AWS_REGION (this process's, else us-east-1), TMPDIR (under Dir),
// AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_TIMEOUT and
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE, then o.Env.
func Start(ctx context.Context, o Options) (*Sandbox, error) {
	if o.RIE == "" || o.Bootstrap == "" || o.Dir == "" {
		return nil, errors.New("sandbox: RIE, Bootstrap and Dir are required")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Timeout < time.Second || o.Timeout%time.Second != 0 {
		return nil, fmt.Errorf("sandbox: a function's timeout is whole seconds, not %v", o.Timeout)
	}
	if o.Name == "" {
		o.Name = "cairn"
	}
	boot, err := filepath.Abs(o.Bootstrap)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"tmp", "task"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(o.Dir, "tmp"),
		"AWS_REGION=" + region, "AWS_DEFAULT_REGION=" + region,
		"AWS_LAMBDA_FUNCTION_NAME=" + o.Name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(o.Timeout/time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024"}
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	for _, k := range passed {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, o.Env...)
	// The bootstrap is started through a script, so that the emulator's own
	// flag parser never sees its arguments, and through setpriv where there
	// is one, so that it dies with the emulator even if the emulator is
	// killed outright.
	wrapper := filepath.Join(o.Dir, "bootstrap")
	if err := os.WriteFile(wrapper, []byte(services.BootstrapScript(boot, o.Args)), 0o755); err != nil {
		return nil, err
	}
	srv, err := services.StartLambdaRIE(ctx, o.RIE, []string{wrapper}, services.Options{
		DataDir: filepath.Join(o.Dir, "task"), LogFile: filepath.Join(o.Dir, "emulator.log"), DieWithParent: true, Env: env})
	if err != nil {
		return nil, fmt.Errorf("starting the Lambda Runtime Interface Emulator %s: %w", o.RIE, err)
	}
	return &Sandbox{srv: srv, dir: o.Dir, timeout: o.Timeout, turn: make(chan struct{}, 1),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}, nil
}

// Log is the path of the file holding the emulator's and the function's
// output.
func (s *Sandbox) Log() string { return filepath.Join(s.dir, "emulator.log") }

// Invoke invokes the function with payload and returns the emulator's
// answer (see TimedOut and Failed); err is set only when no answer came.
// Calls on one Sandbox run one at a time, in turn. If ctx ends while an
// invoke runs, the sandbox is left busy (the emulator would crash on another
// invoke): stop it.
func (s *Sandbox) Invoke(ctx context.Context, payload []byte) ([]byte, int, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	// The emulator answers by the function's timeout; the bound is a
	// backstop.
	rctx, cancel := context.WithTimeout(ctx, s.timeout+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.srv.URL+InvokePath, bytes.NewReader(payload))
	if err != nil {
		<-s.turn
		return nil, 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			<-s.turn
		}
		return nil, 0, fmt.Errorf("invoking the sandbox (its output is in %s): %w", s.Log(), err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ctx.Err() == nil {
		<-s.turn
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the sandbox's answer (its output is in %s): %w", s.Log(), err)
	}
	return body, resp.StatusCode, nil
}

// Freeze pauses the function's running process (SIGSTOP): it stays so until
// its timeout kills it. It fails when no process runs (no invoke started one)
// or on systems without /proc.
func (s *Sandbox) Freeze() error {
	pids := children(s.srv.Cmd.Process.Pid)
	if len(pids) == 0 {
		return errors.New("sandbox: no function process to freeze (none running, or no /proc here)")
	}
	for _, pid := range pids {
		if err := stop(pid); err != nil {
			return fmt.Errorf("sandbox: freezing process %d: %w", pid, err)
		}
	}
	return nil
}

// Stop stops the emulator and its function.
func (s *Sandbox) Stop() { s.srv.Stop() }

// TimedOut reports whether body is the answer to an invoke that ran past the
// function's timeout (its process was killed).
func TimedOut(body []byte) bool { return bytes.HasPrefix(body, []byte("Task timed out after ")) }

// Failed reports whether an answer is a failed invocation: a handled error
// (200 with an errorType), a crash (502), a timeout or another status.
func Failed(body []byte, status int) bool {
	return status != http.StatusOK || TimedOut(body) || bytes.Contains(body, []byte(`"errorType"`))
}
