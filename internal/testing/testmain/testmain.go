// Package testmain is the TestMain every cairn test package shares: it serves
// the child side of process tests, runs the tests, stops the servers testenv
// started, and fails the binary if goroutines leaked.
package testmain

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

// Run is the body of TestMain: testmain.Run(m). cleanups run after the tests.
func Run(m *testing.M, cleanups ...func()) {
	testenv.MaybeChild()
	objstoretest.MaybeChild()
	removeTemp := privateTempDir()
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	testenv.Stop()
	removeTemp()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks reports the goroutines still running. Idle HTTP keep-alive
// connections of SDK clients are not leaks.
//
// goleak is pinned past v1.3.0, whose stack parser panicked on the
// "...N frames elided..." line the runtime prints for a deep stack: a test
// binary that was otherwise green then failed with "Failed to parse stack
// trace" (TestFindLeaksDeepStack).
func findLeaks() error {
	return goleak.Find(
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
