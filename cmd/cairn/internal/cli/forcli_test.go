package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
)

// Errors whose library message names a Go option (docstore.Options.*) reach a
// command-line user reworded to what that user can do, keeping their kind and
// exit code. (Real contention cannot be caused on demand through the binary;
// the store without safe updates is tested through it in servers_test.go.)
func TestForCLINamesNoLibraryOption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		is   error
		code int
	}{
		{fmt.Errorf("lease %q: %w", "locks/a", docstore.ErrContention), docstore.ErrContention, ExitPrecondition},
		{&docstore.UnsafeUpdateError{Key: "reg.json", Store: "s3://b"}, objstore.ErrNotSupported, ExitRuntime},
	} {
		got := forCLI(tc.err)
		if msg := got.Error(); strings.Contains(msg, "Options") || strings.Contains(msg, "LastWriterWins") {
			t.Errorf("%v: reworded %q still names a library option", tc.err, msg)
		}
		if !errors.Is(got, tc.is) || exitCode(got) != tc.code {
			t.Errorf("%v: reworded %v lost its kind (exit %d, want %d)", tc.err, got, exitCode(got), tc.code)
		}
	}
	if got := forCLI(fmt.Errorf("lease %q: %w", "locks/a", docstore.ErrContention)).Error(); !strings.Contains(got, `lease "locks/a"`) {
		t.Errorf("the rewording lost the context: %q", got)
	}
}
