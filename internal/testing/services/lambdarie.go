package services

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// LambdaRIEName is the name of AWS's Lambda Runtime Interface Emulator among
// the binaries built into <CacheDir>/bin.
const LambdaRIEName = "aws-lambda-rie"

// LambdaRIEModule is the pinned Lambda Runtime Interface Emulator built from
// the Go module proxy (a few seconds).
const LambdaRIEModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// LambdaRIEBinary returns the path of the emulator ($CAIRN_TEST_LAMBDA_RIE,
// else <CacheDir>/bin/aws-lambda-rie) and whether it exists. Unlike the
// servers, it is not started once and shared: one emulator runs one function,
// one invoke at a time, so each test starts its own (package
// internal/testing/lambdatest).
func LambdaRIEBinary() (string, bool) {
	p := os.Getenv("CAIRN_TEST_LAMBDA_RIE")
	if p == "" {
		p = filepath.Join(CacheDir(), "bin", LambdaRIEName)
	}
	_, err := os.Stat(p)
	return p, err == nil
}

// StartLambdaRIE starts the emulator bin running the custom-runtime bootstrap
// command (its path and arguments) with the emulator's invoke API on a free
// loopback port (Server.URL, http://127.0.0.1:PORT) and the Runtime API the
// bootstrap talks to on another (Server.RuntimeAPI, 127.0.0.1:PORT, which
// the bootstrap finds in AWS_LAMBDA_RUNTIME_API). The emulator hands its whole
// environment to the function, so it gets o.Env alone, not this process's.
// Its working directory, which the bootstrap inherits, is o.DataDir. The
// ports are picked free and then bound by the emulator; if another process
// takes one in between, the emulator exits and the start is retried on fresh
// ports.
func StartLambdaRIE(ctx context.Context, bin string, command []string, o Options) (*Server, error) {
	if len(command) == 0 {
		return nil, errors.New("StartLambdaRIE: no bootstrap command")
	}
	var err error
	for range 5 {
		var s *Server
		s, err = startLambdaRIE(ctx, bin, command, o)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
	return nil, err
}

func startLambdaRIE(ctx context.Context, bin string, command []string, o Options) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	rport, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr, rapi := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", rport)
	// --runtime-api-address 127.0.0.1:0 does not work: the Runtime API then
	// listens on a port of the kernel's choosing but the bootstrap is told
	// port 0.
	args := append([]string{"--runtime-interface-emulator-address", addr, "--runtime-api-address", rapi}, command...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{}, o.Env...)
	cmd.Dir = o.DataDir
	s, err := start(cmd, o)
	if err != nil {
		return nil, err
	}
	s.URL, s.RuntimeAPI = "http://"+addr, rapi
	// The emulator binds the Runtime API before its invoke API, and serves
	// nothing but the invoke path: any other path is Go's 404, which says it is
	// up (an invoke would start the function).
	if err := waitReady(ctx, s, LambdaRIEName, o, func() bool {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// BootstrapScript is a shell script that execs the bootstrap boot with args
// (under setpriv --pdeathsig KILL where it exists, so the bootstrap dies with
// the emulator), keeping the pid the emulator started; the emulator is given
// the script, so its own flag parser never sees the bootstrap's arguments.
func BootstrapScript(boot string, args []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nexec")
	if runtime.GOOS == "linux" {
		if sp, err := exec.LookPath("setpriv"); err == nil {
			b.WriteString(" " + shellQuote(sp) + " --pdeathsig KILL --")
		}
	}
	b.WriteString(" " + shellQuote(boot))
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
