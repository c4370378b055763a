package lambdatest_test

import (
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
)

// TestMain is the shared one: it fails the binary if goroutines leaked.
func TestMain(m *testing.M) { testmain.Run(m) }
