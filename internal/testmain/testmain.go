// Package testmain is the TestMain every cairn test package shares: it serves
// the child side of process tests, runs the tests, stops the servers testenv
// started, and fails the binary if goroutines leaked.
package testmain

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/cairn-s3/cairn/internal/testenv"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

// Run is the body of TestMain: testmain.Run(m). cleanups run after the tests.
func Run(m *testing.M, cleanups ...func()) {
	testenv.MaybeChild()
	objstoretest.MaybeChild()
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	testenv.Stop()
	if code == 0 {
		// Idle HTTP keep-alive connections of SDK clients are not leaks.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
