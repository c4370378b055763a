package intake_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairn-s3/cairn/intake"
)

type namedSource string

func (n namedSource) Name() string                                 { return string(n) }
func (n namedSource) Run(ctx context.Context, _ intake.Sink) error { <-ctx.Done(); return nil }

// testSrcRuns numbers TestOpenSource's runs: each registers its own scheme
// (a scheme registers once per process, and go test -count=N runs a test N
// times in one).
var testSrcRuns atomic.Int64

// TestOpenSource: a registered scheme opens through its opener; an unknown
// one is ErrUnknownSource naming the registered schemes.
func TestOpenSource(t *testing.T) {
	t.Parallel()
	scheme := fmt.Sprint("testsrc", testSrcRuns.Add(1))
	intake.RegisterSource(scheme, func(_ context.Context, url string, log *slog.Logger) (intake.Source, error) {
		if log == nil {
			t.Error("OpenSource handed the opener a nil logger")
		}
		return namedSource(url), nil
	})
	url := scheme + "://h?x=1"
	s, err := intake.OpenSource(context.Background(), url, nil)
	if err != nil || s.Name() != url {
		t.Fatalf("OpenSource: %v, %v", s, err)
	}
	for _, raw := range []string{"gopher://h", "no-scheme"} {
		_, err = intake.OpenSource(context.Background(), raw, nil)
		if !errors.Is(err, intake.ErrUnknownSource) || !strings.Contains(err.Error(), scheme+"://") {
			t.Fatalf("%q: %v, want ErrUnknownSource naming %s://", raw, err, scheme)
		}
	}
}
