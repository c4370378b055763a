// Package lambdatest runs a Lambda function — a custom-runtime bootstrap
// (provided.al2023) — under AWS's Lambda Runtime Interface Emulator on
// loopback, for tests: Start one emulator per function, Invoke it, and it stops
// by itself when the test ends.
//
//	boot := lambdatest.BuildBootstrap(t, "github.com/cairn-s3/cairn/cmd/cairn")
//	fn := lambdatest.Start(t, lambdatest.Function{Bootstrap: boot, Args: []string{"lambda"},
//		Env: ep.Env(), Timeout: 3 * time.Second})
//	body, status, err := fn.Invoke(ctx, payload)
//
// The emulator is built from the Go module proxy at a pinned version
// (services.LambdaRIEModule) into the cache by the README's test command
// (`go run ./internal/testing/cmd/services install`); `services start|run`
// export its path as CAIRN_TEST_LAMBDA_RIE. Without it a test skips, or fails
// when CAIRN_TEST_REQUIRE_SERVICES=1 or CI is set, like every real component.
//
// # What the emulator does (read in its source, observed here, and asserted by this package's tests)
//
//   - Invoke API: POST /2015-03-31/functions/function/invocations on
//     --runtime-interface-emulator-address; every answer is text/plain, and
//     no answer carries X-Amz-Function-Error: tell a result from an error by
//     its body.
//   - Runtime API: on --runtime-api-address, which the bootstrap gets in
//     AWS_LAMBDA_RUNTIME_API. Its default is the fixed 127.0.0.1:9001, so two
//     emulators with the default collide; port 0 does not work either (it
//     listens on some port and tells the bootstrap port 0). Start picks two
//     free loopback ports and retries on fresh ones if one was taken meanwhile.
//   - The bootstrap starts on the first invoke, not at start-up, in its own
//     process group, in the emulator's working directory, with the
//     emulator's whole environment plus AWS_LAMBDA_RUNTIME_API,
//     AWS_LAMBDA_FUNCTION_NAME/VERSION/MEMORY_SIZE and AWS_ACCESS_KEY_ID,
//     AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (empty when unset). The
//     invoked ARN is arn:aws:lambda:us-east-1:012345678912:function:NAME; the
//     deadline the function sees is the invoke's start plus the timeout.
//   - A result: 200 with the function's answer; the same process serves the
//     next invoke.
//   - A handled error (the handler returns an error): 200 with
//     {"errorMessage":"…","errorType":"…"} (aws-lambda-go's type name, e.g.
//     "errorString"); the same process serves the next invoke.
//   - A timeout (AWS_LAMBDA_FUNCTION_TIMEOUT, whole seconds): the emulator
//     SIGKILLs the bootstrap's process group and, once it is gone, answers 200
//     with the plain text "Task timed out after N.00 seconds" (TimedOut); the
//     next invoke starts a fresh process.
//   - A crash (the bootstrap exits during an invoke): 502 with
//     {"errorType":"Runtime.ExitError","errorMessage":"RequestId: ID Error:
//     Runtime exited with error: exit status N"}. A Go panic is reported by
//     aws-lambda-go before it exits: 502 with {"errorMessage":"<panic
//     value>","errorType":"<its type>","stackTrace":[…]}. Either way the next
//     invoke starts a fresh process.
//   - One invoke at a time: a second invoke sent while one runs crashes the
//     emulator (a nil dereference after "ReserveFailed: AlreadyReserved"), and
//     an invoke whose client went away still runs to its end. Invoke therefore
//     queues the calls of one Emulator and holds the queue until the emulator
//     has answered, even after its caller gave up. For invocations that run at
//     the same time (Lambda's concurrency, separate sandboxes), start several
//     emulators: each has its own ports and process.
//   - SIGTERM: the emulator SIGKILLs the bootstrap's group and exits 0.
//   - AWS_LAMBDA_MAX_CONCURRENCY switches the emulator to its Lambda Managed
//     Instances mode, which at this version ignores the bootstrap it is given
//     and looks only in /var/runtime, /var/task and /opt: Start refuses it.
//
// Nothing outlives the test: the emulator dies with the test binary
// (Pdeathsig), the bootstrap dies with the emulator (it is started through
// setpriv --pdeathsig KILL where setpriv exists, as on Debian), and the
// cleanup stops the emulator and kills the process groups of the bootstraps it
// still had. The emulator's output, which carries the bootstrap's, is written
// to the test log when the test failed.
package lambdatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/services"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// InvokePath is the emulator's invoke endpoint.
const InvokePath = "/2015-03-31/functions/function/invocations"

// Function is a Lambda function to run under the emulator.
type Function struct {
	// Bootstrap is the path of the custom-runtime bootstrap executable
	// (BuildBootstrap builds one from a Go package). Required.
	Bootstrap string
	// Args are the bootstrap's arguments.
	Args []string
	// Env adds KEY=value variables to the function's environment; they win
	// over the defaults (see Start).
	Env []string
	// Timeout is the function's timeout, in whole seconds as Lambda's
	// (AWS_LAMBDA_FUNCTION_TIMEOUT). Default 3s.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 128.
	MemoryMB int
	// Name is AWS_LAMBDA_FUNCTION_NAME (and the end of the invoked ARN).
	// Default "cairn-test".
	Name string
}

// env returns the emulator's environment (which it hands to the function).
func (f Function) env(dir string) ([]string, error) {
	if f.Bootstrap == "" {
		return nil, errors.New("lambdatest: Function.Bootstrap is required (build one with BuildBootstrap)")
	}
	if f.Timeout == 0 {
		f.Timeout = 3 * time.Second
	}
	if f.Timeout < time.Second || f.Timeout%time.Second != 0 {
		return nil, fmt.Errorf("lambdatest: Function.Timeout %v is not a whole number of seconds (Lambda's timeout is in seconds; the emulator reads AWS_LAMBDA_FUNCTION_TIMEOUT as an integer)", f.Timeout)
	}
	if f.MemoryMB == 0 {
		f.MemoryMB = 128
	}
	if f.Name == "" {
		f.Name = "cairn-test"
	}
	for _, kv := range f.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("lambdatest: Function.Env entry %q is not KEY=value", kv)
		case k == "AWS_LAMBDA_MAX_CONCURRENCY":
			return nil, errors.New("lambdatest: AWS_LAMBDA_MAX_CONCURRENCY switches the emulator to its Lambda Managed Instances mode, which ignores the bootstrap it is given; run several Functions for concurrent invocations")
		case k == "AWS_LAMBDA_FUNCTION_TIMEOUT" || k == "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" || k == "AWS_LAMBDA_FUNCTION_NAME":
			return nil, fmt.Errorf("lambdatest: set %s through Function's Timeout, MemoryMB or Name, not Env", k)
		}
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_LAMBDA_FUNCTION_NAME=" + f.Name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(f.Timeout/time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(f.MemoryMB),
	}
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	return append(env, f.Env...), nil
}

// Emulator is a running emulator with its function.
type Emulator struct {
	t       testing.TB
	srv     *services.Server
	logPath string
	timeout time.Duration
	client  *http.Client
	// turn is held by the invoke in flight, from before it is sent until the
	// emulator has answered it.
	turn     chan struct{}
	stopCtx  context.Context
	stopNow  context.CancelFunc
	inflight sync.WaitGroup
	stopOnce sync.Once
	killed   atomic.Bool
}

// RIE returns the path of the emulator binary, or ends the test as a missing
// real component does (testenv.Unavailable).
func RIE(t testing.TB) string {
	t.Helper()
	bin, ok := services.LambdaRIEBinary()
	if !ok {
		testenv.Unavailable(t, "the Lambda Runtime Interface Emulator", fmt.Errorf("no binary at %s (build it: go run ./internal/testing/cmd/services install)", bin))
	}
	return bin
}

// Start starts an emulator running f on free 127.0.0.1 ports and waits until
// it answers; it stops when the test ends. The function's environment is:
// PATH and HOME from this process, TMPDIR (a directory of its own),
// AWS_REGION and AWS_DEFAULT_REGION us-east-1, AWS_LAMBDA_FUNCTION_NAME,
// AWS_LAMBDA_FUNCTION_TIMEOUT and AWS_LAMBDA_FUNCTION_MEMORY_SIZE from f,
// then f.Env; plus what the emulator adds (see the package doc). Its working
// directory is an empty directory of its own.
func Start(t testing.TB, f Function) *Emulator {
	t.Helper()
	bin := RIE(t)
	dir := t.TempDir()
	env, err := f.env(dir)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := filepath.Abs(f.Bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(boot); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("lambdatest: bootstrap %s is not an executable file (%v)", boot, err)
	}
	for _, d := range []string{"tmp", "task"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The bootstrap is started through a script, so that the emulator's own
	// flag parser never sees its arguments, and through setpriv, so that it
	// dies with the emulator even if the emulator is killed outright.
	wrapper := filepath.Join(dir, "bootstrap")
	if err := os.WriteFile(wrapper, []byte(services.BootstrapScript(boot, f.Args)), 0o755); err != nil {
		t.Fatal(err)
	}
	timeout := f.Timeout
	if timeout == 0 {
		timeout = 3 * time.Second
	}
	e := &Emulator{t: t, logPath: filepath.Join(dir, "emulator.log"), timeout: timeout, turn: make(chan struct{}, 1),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
	e.stopCtx, e.stopNow = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e.srv, err = services.StartLambdaRIE(ctx, bin, []string{wrapper},
		services.Options{DataDir: filepath.Join(dir, "task"), LogFile: e.logPath, DieWithParent: true, Env: env})
	if err != nil {
		testenv.Unavailable(t, "the Lambda Runtime Interface Emulator", err)
	}
	t.Cleanup(e.Stop)
	return e
}

// URL is the emulator's invoke URL (http://127.0.0.1:PORT + InvokePath).
func (e *Emulator) URL() string { return e.srv.URL + InvokePath }

// RuntimeAPI is the Runtime API address the function is given
// (AWS_LAMBDA_RUNTIME_API).
func (e *Emulator) RuntimeAPI() string { return e.srv.RuntimeAPI }

// PID is the emulator's process id.
func (e *Emulator) PID() int { return e.srv.Cmd.Process.Pid }

// Processes returns the process ids of the emulator's running children: the
// bootstrap, once an invoke started it (Linux; nil elsewhere).
func (e *Emulator) Processes() []int { return liveChildren(e.PID()) }

// Output is what the emulator and the bootstrap have written so far.
func (e *Emulator) Output() string {
	data, _ := os.ReadFile(e.logPath)
	return string(data)
}

// Invoke invokes the function with payload and returns the emulator's answer:
// its body and HTTP status (see the package doc for what each outcome
// answers); err is set only when no answer came. Calls on one Emulator run one
// at a time, in turn: a call waits until the invoke before it has been
// answered, even one whose caller gave up, since the emulator cannot take a
// second invoke while one runs. When ctx ends first, Invoke returns ctx's error
// at once and the invoke runs on in the emulator.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) ([]byte, int, error) {
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-e.stopCtx.Done():
		return nil, 0, errors.New("lambdatest: the emulator is stopped")
	}
	type answer struct {
		body   []byte
		status int
		err    error
	}
	done := make(chan answer, 1)
	e.inflight.Add(1)
	go func() {
		defer e.inflight.Done()
		defer func() { <-e.turn }()
		// The emulator answers every invoke by the function's timeout (plus
		// its own start-up and clean-up); the bound is only a backstop.
		rctx, cancel := context.WithTimeout(e.stopCtx, e.timeout+time.Minute)
		defer cancel()
		var a answer
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, e.URL(), bytes.NewReader(payload))
		if err == nil {
			var resp *http.Response
			if resp, err = e.client.Do(req); err == nil {
				a.body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				a.status = resp.StatusCode
			}
		}
		if err != nil {
			a = answer{err: fmt.Errorf("lambdatest: invoking %s: %w", e.URL(), err)}
		}
		done <- a
	}()
	select {
	case a := <-done:
		return a.body, a.status, a.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// Kill SIGKILLs the emulator alone, as the death of the test binary does
// (Pdeathsig): the bootstrap dies with it. The test's cleanup then does not
// count the emulator's exit as its own.
func (e *Emulator) Kill() {
	e.killed.Store(true)
	_ = e.srv.Cmd.Process.Kill()
	<-e.srv.Exited()
}

// Stop stops the emulator and its function and waits for them; the test's
// cleanup calls it. If the test failed, it writes their output to the test
// log; if the emulator had exited by itself, the test fails.
func (e *Emulator) Stop() {
	e.stopOnce.Do(func() {
		select {
		case <-e.srv.Exited():
			if e.killed.Load() {
				break
			}
			e.t.Errorf("lambdatest: the emulator (pid %d) exited by itself before the test ended", e.PID())
		default:
		}
		// The emulator kills its bootstrap's process group on SIGTERM; these
		// are killed again in case it could not (killed after its grace
		// period, or a bootstrap that outlived it).
		killGroups := groupKiller(e.Processes())
		e.stopNow()
		e.srv.Stop()
		killGroups()
		e.inflight.Wait()
		e.client.CloseIdleConnections()
		if e.t.Failed() {
			out := e.Output()
			if len(out) > 64<<10 {
				out = "…" + out[len(out)-64<<10:]
			}
			e.t.Logf("lambdatest: output of the emulator (pid %d) and its function:\n%s", e.PID(), out)
		}
	})
}

// TimedOut reports whether body is the emulator's answer to an invoke that
// ran past the function's timeout ("Task timed out after N.00 seconds").
func TimedOut(body []byte) bool { return bytes.HasPrefix(body, []byte("Task timed out after ")) }

// FunctionError is the error body the emulator answers for a handled error
// (200), a crash or a panic (502).
type FunctionError struct {
	Message    string          `json:"errorMessage"`
	Type       string          `json:"errorType"`
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
}

// ParseError decodes body as an error answer: ok is false unless it is a JSON
// object with an errorType.
func ParseError(body []byte) (FunctionError, bool) {
	var fe FunctionError
	if err := json.Unmarshal(body, &fe); err != nil || fe.Type == "" {
		return FunctionError{}, false
	}
	return fe, true
}

type build struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // "pkg\x00flags" -> *build

// BuildBootstrap builds the Go main package pkg (an import path, e.g.
// "github.com/cairn-s3/cairn/cmd/cairn") as a custom-runtime bootstrap — go
// build -tags lambda.norpc, for this machine's GOOS/GOARCH — with flags added
// to go build (e.g. "-race"), once per test binary and set of flags, and
// returns its path. It lives until the test binary ends (testenv.Stop). A
// failed build fails the test with the compiler's output.
func BuildBootstrap(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg+"\x00"+strings.Join(flags, "\x00"), &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := testenv.RunTempDir("cairn-bootstrap-")
		if err != nil {
			b.err = err
			return
		}
		out := filepath.Join(dir, "bootstrap")
		args := append([]string{"build", "-tags", "lambda.norpc", "-o", out}, flags...)
		cmd := exec.Command("go", append(args, pkg)...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, msg)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatalf("lambdatest: building the bootstrap %s: %v", pkg, b.err)
	}
	return b.path
}
