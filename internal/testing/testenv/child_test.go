package testenv_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func init() {
	testenv.RegisterChild("testenv-exit", func() int {
		if os.Getenv("CHILD_SAYS") != "hello" {
			return 1
		}
		return 7
	})
	testenv.RegisterChild("testenv-hang", func() int { select {} })
}

func TestChildRunsRegisteredBody(t *testing.T) {
	t.Parallel()
	err := testenv.Child(t, "testenv-exit", "CHILD_SAYS=hello").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("child exited with %v, want status 7", err)
	}
}

func TestChildKilledAtCleanup(t *testing.T) {
	t.Parallel()
	var cmd *exec.Cmd
	t.Run("starts", func(t *testing.T) {
		cmd = testenv.Child(t, "testenv-hang")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	})
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("the subtest's cleanup did not kill and wait for its child: %v", cmd.ProcessState)
	}
}
