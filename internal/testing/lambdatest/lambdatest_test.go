package lambdatest_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/lambdatest"
)

const testFunction = "github.com/cairn-s3/cairn/internal/testing/lambdatest/testfunction"

// request and response are testfunction's.
type request struct {
	Op   string   `json:"op"`
	Say  string   `json:"say,omitempty"`
	Ms   int      `json:"ms,omitempty"`
	Code int      `json:"code,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	Me   string   `json:"me,omitempty"`
	Peer string   `json:"peer,omitempty"`
}

type response struct {
	PID         int               `json:"pid"`
	Args        []string          `json:"args"`
	Say         string            `json:"say"`
	RuntimeAPI  string            `json:"runtime_api"`
	RequestID   string            `json:"request_id"`
	FunctionARN string            `json:"function_arn"`
	DeadlineMs  int64             `json:"deadline_in_ms"`
	Env         map[string]string `json:"env"`
}

func start(t *testing.T, f lambdatest.Function) *lambdatest.Emulator {
	t.Helper()
	lambdatest.RIE(t) // skip before building when there is no emulator
	f.Bootstrap = lambdatest.BuildBootstrap(t, testFunction)
	return lambdatest.Start(t, f)
}

func invoke(t *testing.T, e *lambdatest.Emulator, req request) ([]byte, int) {
	t.Helper()
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body, status, err := e.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke %+v: %v", req, err)
	}
	return body, status
}

// result invokes req and wants the function's result.
func result(t *testing.T, e *lambdatest.Emulator, req request) response {
	t.Helper()
	body, status := invoke(t, e, req)
	var r response
	if err := json.Unmarshal(body, &r); status != 200 || err != nil || r.PID == 0 {
		t.Fatalf("invoke %+v: %d %s (%v), want 200 and a result", req, status, body, err)
	}
	return r
}

func linuxOnly(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("watches processes through /proc")
	}
}

// waitFile waits until path exists (a function got that far).
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// An invoke answers the function's result; the bootstrap starts on the first
// invoke, gets its arguments byte-exact and the environment the package doc
// describes, and serves the next invoke in the same process.
func TestInvokeAnswersTheResult(t *testing.T) {
	t.Parallel()
	linuxOnly(t)
	args := []string{"--log-level", "debug", "it's one argument", "--", "$HOME"}
	e := start(t, lambdatest.Function{Name: "echo-fn", Args: args, Env: []string{"FOO=bar baz", "AWS_REGION=eu-west-1",
		"AWS_ACCESS_KEY_ID=cairnadmin", "AWS_SECRET_ACCESS_KEY=cairnadmin-secret"}})
	if p := e.Processes(); len(p) != 0 {
		t.Fatalf("the bootstrap runs before the first invoke: processes %v", p)
	}
	// A variable of this process that the function must not get.
	mine := ""
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "PATH" && k != "HOME" && k != "TMPDIR" && !strings.HasPrefix(k, "AWS_") && k != "" {
			mine = k
			break
		}
	}
	r := result(t, e, request{Op: "echo", Say: "hello", Env: []string{"FOO", "AWS_REGION", "AWS_LAMBDA_FUNCTION_NAME",
		"AWS_LAMBDA_RUNTIME_API", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "TMPDIR", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", mine}})
	if r.Say != "hello" || !slices.Equal(r.Args, args) {
		t.Errorf("say %q args %q, want hello and %q", r.Say, r.Args, args)
	}
	if r.RuntimeAPI != e.RuntimeAPI() || r.Env["AWS_LAMBDA_RUNTIME_API"] != e.RuntimeAPI() {
		t.Errorf("runtime API %q (env %q), want %q", r.RuntimeAPI, r.Env["AWS_LAMBDA_RUNTIME_API"], e.RuntimeAPI())
	}
	if ok, _ := regexp.MatchString(`^127\.0\.0\.1:[0-9]+$`, e.RuntimeAPI()); !ok || e.RuntimeAPI() == "127.0.0.1:9001" {
		t.Errorf("runtime API %q, want a loopback port of its own", e.RuntimeAPI())
	}
	want := map[string]string{"FOO": "bar baz", "AWS_REGION": "eu-west-1", "AWS_LAMBDA_FUNCTION_NAME": "echo-fn",
		"AWS_LAMBDA_RUNTIME_API": e.RuntimeAPI(), "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128",
		// The emulator passes credentials on as Lambda does, an unset one as empty.
		"AWS_ACCESS_KEY_ID": "cairnadmin", "AWS_SECRET_ACCESS_KEY": "cairnadmin-secret", "AWS_SESSION_TOKEN": ""}
	for k, v := range want {
		if r.Env[k] != v {
			t.Errorf("function's %s = %q, want %q", k, r.Env[k], v)
		}
	}
	if _, ok := r.Env[mine]; ok && mine != "" {
		t.Errorf("the test process's environment reached the function (%s)", mine)
	}
	if r.Env["TMPDIR"] == "" || r.Env["TMPDIR"] == os.TempDir() {
		t.Errorf("function's TMPDIR %q, want a directory of its own", r.Env["TMPDIR"])
	}
	if r.FunctionARN != "arn:aws:lambda:us-east-1:012345678912:function:echo-fn" || r.RequestID == "" {
		t.Errorf("ARN %q request id %q", r.FunctionARN, r.RequestID)
	}
	if r.DeadlineMs <= 0 || r.DeadlineMs > 3000 {
		t.Errorf("deadline %d ms away, want within the default 3 s timeout", r.DeadlineMs)
	}
	if p := e.Processes(); !slices.Equal(p, []int{r.PID}) {
		t.Errorf("emulator's processes %v, want the bootstrap %d", p, r.PID)
	}
	if r2 := result(t, e, request{Op: "echo"}); r2.PID != r.PID || r2.RequestID == r.RequestID {
		t.Errorf("second invoke: pid %d request %s, want the same process %d and a new request", r2.PID, r2.RequestID, r.PID)
	}
}

// A handled error answers 200 with an error body, and the process lives on.
func TestHandledErrorAnswers200WithErrorBody(t *testing.T) {
	t.Parallel()
	e := start(t, lambdatest.Function{})
	before := result(t, e, request{Op: "echo"})
	body, status := invoke(t, e, request{Op: "error", Say: "boom"})
	fe, ok := lambdatest.ParseError(body)
	if status != 200 || !ok || fe.Message != "boom" || fe.Type != "errorString" || fe.StackTrace != nil {
		t.Fatalf("handled error answered %d %s, want 200 {boom errorString}", status, body)
	}
	if string(body) != `{"errorMessage":"boom","errorType":"errorString"}` {
		t.Errorf("body %s", body)
	}
	if after := result(t, e, request{Op: "echo"}); after.PID != before.PID {
		t.Errorf("after a handled error the function runs in pid %d, want the same %d", after.PID, before.PID)
	}
}

// The timeout kills the process and answers 200 "Task timed out after N.00
// seconds"; the next invoke starts a fresh process.
func TestTimeoutKillsTheProcess(t *testing.T) {
	t.Parallel()
	e := start(t, lambdatest.Function{Timeout: time.Second})
	before := result(t, e, request{Op: "echo"})
	body, status := invoke(t, e, request{Op: "sleep", Ms: 120_000})
	if status != 200 || string(body) != "Task timed out after 1.00 seconds" || !lambdatest.TimedOut(body) {
		t.Fatalf("timed-out invoke answered %d %q, want 200 \"Task timed out after 1.00 seconds\"", status, body)
	}
	if runtime.GOOS == "linux" && lambdatest.Alive(before.PID) {
		t.Errorf("the timed-out process %d still runs after the answer", before.PID)
	}
	after := result(t, e, request{Op: "echo"})
	if after.PID == before.PID {
		t.Errorf("the invoke after a timeout ran in the same process %d", after.PID)
	}
}

// A crash answers 502 with the error, and the next invoke runs in a fresh
// process.
func TestCrashAnswers502AndRestarts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  request
		want func(lambdatest.FunctionError) bool
	}{
		{"exit", request{Op: "exit", Code: 3}, func(fe lambdatest.FunctionError) bool {
			ok, _ := regexp.MatchString(`^RequestId: [0-9a-f-]{36} Error: Runtime exited with error: exit status 3$`, fe.Message)
			return ok && fe.Type == "Runtime.ExitError" && fe.StackTrace == nil
		}},
		{"panic", request{Op: "panic", Say: "pan"}, func(fe lambdatest.FunctionError) bool {
			return fe.Message == "pan" && fe.Type == "string" && len(fe.StackTrace) > 2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, lambdatest.Function{})
			before := result(t, e, request{Op: "echo"})
			body, status := invoke(t, e, tc.req)
			fe, ok := lambdatest.ParseError(body)
			if status != 502 || !ok || !tc.want(fe) {
				t.Fatalf("crash answered %d %s", status, body)
			}
			if runtime.GOOS == "linux" && lambdatest.Alive(before.PID) {
				t.Errorf("the crashed process %d still runs", before.PID)
			}
			if after := result(t, e, request{Op: "echo"}); after.PID == before.PID {
				t.Errorf("the invoke after a crash ran in the same process %d", after.PID)
			}
		})
	}
}

// Two emulators run at once: each function waits for the other to have
// started, so both answer only if both run at the same time.
func TestTwoEmulatorsRunAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var es [2]*lambdatest.Emulator
	for i := range es {
		es[i] = start(t, lambdatest.Function{Timeout: 60 * time.Second})
	}
	if es[0].RuntimeAPI() == es[1].RuntimeAPI() || es[0].URL() == es[1].URL() {
		t.Fatalf("the emulators share ports: %s %s / %s %s", es[0].URL(), es[0].RuntimeAPI(), es[1].URL(), es[1].RuntimeAPI())
	}
	var rs [2]response
	var wg sync.WaitGroup
	for i, me := range []string{"a", "b"} {
		wg.Go(func() {
			peer := map[string]string{"a": "b", "b": "a"}[me]
			rs[i] = result(t, es[i], request{Op: "meet", Dir: dir, Me: me, Peer: peer})
		})
	}
	wg.Wait()
	if rs[0].PID == rs[1].PID || rs[0].RuntimeAPI == rs[1].RuntimeAPI {
		t.Errorf("both functions ran in pid %d / runtime API %s", rs[0].PID, rs[0].RuntimeAPI)
	}
}

// Invokes of one emulator run in turn: one sent while another runs would
// crash the emulator, so Invoke queues it until the first is answered.
func TestInvokesOfOneEmulatorQueue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := start(t, lambdatest.Function{Timeout: 60 * time.Second})
	var first response
	var wg sync.WaitGroup
	wg.Go(func() { first = result(t, e, request{Op: "meet", Dir: dir, Me: "first", Peer: "go"}) })
	waitFile(t, filepath.Join(dir, "first"))
	var second response
	wg.Go(func() { second = result(t, e, request{Op: "echo", Say: "second"}) })
	// Give the second call time to be sent, were it not queued (the test
	// passes whatever the timing; it can only fail to notice a missing queue).
	time.Sleep(200 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if second.Say != "second" || second.PID != first.PID {
		t.Errorf("second invoke: %+v, want answered by the same process %d", second, first.PID)
	}
}

// A caller that gives up returns at once, and the invoke after it still waits
// for the emulator to finish the abandoned one.
func TestInvokeWhoseCallerGaveUp(t *testing.T) {
	t.Parallel()
	linuxOnly(t)
	dir := t.TempDir()
	e := start(t, lambdatest.Function{Timeout: 60 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() {
		_, _, err := e.Invoke(ctx, []byte(`{"op":"meet","dir":"`+dir+`","me":"abandoned","peer":"go"}`))
		gaveUp <- err
	}()
	waitFile(t, filepath.Join(dir, "abandoned"))
	pids := e.Processes()
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned invoke returned %v, want context.Canceled", err)
	}
	var next response
	var wg sync.WaitGroup
	wg.Go(func() { next = result(t, e, request{Op: "echo", Say: "next"}) })
	time.Sleep(200 * time.Millisecond) // as in TestInvokesOfOneEmulatorQueue
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if next.Say != "next" || !slices.Equal([]int{next.PID}, pids) {
		t.Errorf("next invoke: %+v, want answered by the bootstrap %v", next, pids)
	}
}

// Nothing outlives the emulator: stopped, or killed outright as when the test
// binary dies, it takes its bootstrap along in the middle of an invoke.
func TestNothingOutlivesTheEmulator(t *testing.T) {
	t.Parallel()
	linuxOnly(t)
	for _, how := range []string{"Stop", "Kill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			e := start(t, lambdatest.Function{Timeout: 600 * time.Second})
			answered := make(chan error, 1)
			go func() {
				_, _, err := e.Invoke(context.Background(), []byte(`{"op":"meet","dir":"`+dir+`","me":"running","peer":"never"}`))
				answered <- err
			}()
			waitFile(t, filepath.Join(dir, "running"))
			pids := e.Processes()
			if len(pids) != 1 {
				t.Fatalf("emulator's processes %v, want the bootstrap", pids)
			}
			if how == "Stop" {
				e.Stop()
			} else {
				e.Kill()
			}
			if err := <-answered; err == nil {
				t.Error("the invoke in flight got an answer from a stopped emulator")
			}
			for deadline := time.Now().Add(time.Minute); lambdatest.Alive(pids[0]); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the bootstrap %d outlived the emulator", pids[0])
				}
			}
		})
	}
}
