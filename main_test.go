package cairn_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines. (The shared internal/testing/testmain would
// import this package back through objstore: a cycle.)
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
