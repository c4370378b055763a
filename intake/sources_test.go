package intake_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake"
)

type namedSource string

func (n namedSource) Name() string                                 { return string(n) }
func (n namedSource) Run(ctx context.Context, _ intake.Sink) error { <-ctx.Done(); return nil }

// TestOpenSource: a registered scheme opens through its opener; an unknown
// one is ErrUnknownSource naming the registered schemes.
func TestOpenSource(t *testing.T) {
	t.Parallel()
	intake.RegisterSource("testsrc", func(_ context.Context, url string, log *slog.Logger) (intake.Source, error) {
		if log == nil {
			t.Error("OpenSource handed the opener a nil logger")
		}
		return namedSource(url), nil
	})
	s, err := intake.OpenSource(context.Background(), "testsrc://h?x=1", nil)
	if err != nil || s.Name() != "testsrc://h?x=1" {
		t.Fatalf("OpenSource: %v, %v", s, err)
	}
	for _, raw := range []string{"gopher://h", "no-scheme"} {
		_, err = intake.OpenSource(context.Background(), raw, nil)
		if !errors.Is(err, intake.ErrUnknownSource) || !strings.Contains(err.Error(), "testsrc://") {
			t.Fatalf("%q: %v, want ErrUnknownSource naming testsrc://", raw, err)
		}
	}
}
