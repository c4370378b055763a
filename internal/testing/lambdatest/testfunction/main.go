// Command testfunction is the Lambda function lambdatest proves the emulator
// harness on: a custom-runtime bootstrap (build it with -tags lambda.norpc)
// whose request says what to do.
//
//	{"op":"echo","say":"x"}    answers {"pid":…,"say":"x",…}
//	{"op":"error","say":"x"}   returns an error (a handled error) whose message is x
//	{"op":"sleep","ms":N}      sleeps N ms, then answers like echo
//	{"op":"exit","code":N}     exits the process with status N (a crash)
//	{"op":"panic","say":"x"}   panics with x
//	{"op":"meet","dir":D,"me":"a","peer":"b"}
//	                           creates D/a, then waits for D/b to exist (another
//	                           invocation's "me") and answers like echo; returns
//	                           an error if it does not appear before the deadline
//
// Every answer carries the process id, its arguments, the runtime API address it was given,
// the deadline it saw and the environment variables the request names.
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

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
	Say         string            `json:"say,omitempty"`
	RuntimeAPI  string            `json:"runtime_api"`
	RequestID   string            `json:"request_id"`
	FunctionARN string            `json:"function_arn"`
	DeadlineMs  int64             `json:"deadline_in_ms"`
	Env         map[string]string `json:"env,omitempty"`
}

func handle(ctx context.Context, req request) (response, error) {
	resp := response{PID: os.Getpid(), Args: os.Args[1:], Say: req.Say, RuntimeAPI: os.Getenv("AWS_LAMBDA_RUNTIME_API")}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		resp.RequestID, resp.FunctionARN = lc.AwsRequestID, lc.InvokedFunctionArn
	}
	if d, ok := ctx.Deadline(); ok {
		resp.DeadlineMs = time.Until(d).Milliseconds()
	}
	for _, k := range req.Env {
		if v, ok := os.LookupEnv(k); ok {
			if resp.Env == nil {
				resp.Env = map[string]string{}
			}
			resp.Env[k] = v
		}
	}
	switch req.Op {
	case "echo":
	case "error":
		return response{}, errors.New(req.Say)
	case "sleep":
		time.Sleep(time.Duration(req.Ms) * time.Millisecond)
	case "exit":
		os.Exit(req.Code)
	case "panic":
		panic(req.Say)
	case "meet":
		if err := os.WriteFile(filepath.Join(req.Dir, req.Me), nil, 0o644); err != nil {
			return response{}, err
		}
		for {
			if _, err := os.Stat(filepath.Join(req.Dir, req.Peer)); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return response{}, errors.New("peer " + req.Peer + " never came")
			case <-time.After(10 * time.Millisecond):
			}
		}
	default:
		return response{}, errors.New("unknown op " + req.Op)
	}
	return resp, nil
}

func main() { lambda.Start(handle) }
