package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/ledger"
)

// spy is a Backend that records what reaches it: the Ledger's checks must
// stop bad arguments before the backend, and shape what it passes on.
type spy struct {
	ledger.Backend // nil: any call not overridden panics
	calls          []string
	results        []string
	cause          string
}

func (s *spy) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	s.calls = append(s.calls, "claim")
	return nil, nil
}

func (s *spy) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	s.calls = append(s.calls, "renew")
	return c, nil
}

func (s *spy) Complete(ctx context.Context, c ledger.Claim, result string) error {
	s.calls, s.results = append(s.calls, "complete"), append(s.results, result)
	return nil
}

func (s *spy) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	s.calls, s.results = append(s.calls, "completebatch"), append(s.results, results...)
	return make([]error, len(cs)), nil
}

func (s *spy) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	s.calls, s.cause = append(s.calls, "fail"), cause
	return nil
}

func (s *spy) Release(ctx context.Context, c ledger.Claim) error {
	s.calls = append(s.calls, "release")
	return nil
}

// A Claim no backend can find (no bucket or identity) is ledger.ErrNotFound,
// as a backend would answer, without a round trip; a lease that would expire
// as it is granted is refused; n ≤ 0 claims nothing.
func TestLedgerChecksArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &spy{}
	l := ledger.New(s)
	held := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "k"}, Ident: "k"}
	bare := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "k"}} // no Ident: not from Claim

	if cs, err := l.Claim(ctx, 0, time.Minute); err != nil || cs != nil {
		t.Errorf("Claim(0): %v %v, want nothing", cs, err)
	}
	for _, lease := range []time.Duration{0, -time.Second} {
		if _, err := l.Claim(ctx, 1, lease); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("Claim with lease %v: %v, want a refusal", lease, err)
		}
		if _, _, err := l.RecordAndClaim(ctx, "t", nil, 1, lease); err == nil {
			t.Errorf("RecordAndClaim with lease %v: no error", lease)
		}
		if _, err := l.Renew(ctx, held, lease); err == nil {
			t.Errorf("Renew with lease %v: no error", lease)
		}
	}
	if _, err := l.Renew(ctx, bare, time.Minute); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Renew of a claim without identity: %v, want ErrNotFound", err)
	}
	if err := l.Complete(ctx, bare, ""); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Complete of a claim without identity: %v, want ErrNotFound", err)
	}
	if err := l.Fail(ctx, bare, "x", true); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Fail of a claim without identity: %v, want ErrNotFound", err)
	}
	if err := l.Release(ctx, bare); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("Release of a claim without identity: %v, want ErrNotFound", err)
	}
	if _, err := l.CompleteBatch(ctx, []ledger.Claim{held}, nil); err == nil {
		t.Error("CompleteBatch with a result missing: no error")
	}
	if errs, err := l.CompleteBatch(ctx, nil, nil); err != nil || len(errs) != 0 {
		t.Errorf("CompleteBatch of nothing: %v %v", errs, err)
	}
	if len(s.calls) != 0 {
		t.Fatalf("refused calls reached the backend: %v", s.calls)
	}

	// In a batch, only the claim without identity is refused.
	errs, err := l.CompleteBatch(ctx, []ledger.Claim{bare, held}, []string{"a", "b"})
	if err != nil || !errors.Is(errs[0], ledger.ErrNotFound) || errs[1] != nil {
		t.Fatalf("CompleteBatch(bare, held): %v %v", errs, err)
	}
	if len(s.results) != 1 || s.results[0] != "b" {
		t.Fatalf("the backend got results %q, want just b's", s.results)
	}
}

// Results and causes are cut to MaxText bytes at a character boundary, in the
// Ledger, whatever the backend: what is stored is valid UTF-8.
func TestLedgerClipsText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &spy{}
	l := ledger.New(s)
	c := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "k"}, Ident: "k"}
	long := strings.Repeat("a", ledger.MaxText-1) + "é and more" // é straddles the limit
	short := "fine ✓"
	if err := l.Complete(ctx, c, long); err != nil {
		t.Fatal(err)
	}
	if err := l.Fail(ctx, c, long, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CompleteBatch(ctx, []ledger.Claim{c, c}, []string{short, long}); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("a", ledger.MaxText-1)
	for i, got := range append(s.results, s.cause) {
		if i == 1 {
			if got != short {
				t.Errorf("a short result was changed: %q", got)
			}
			continue
		}
		if got != want || !utf8.ValidString(got) {
			t.Errorf("text %d: %d bytes (valid UTF-8: %v), want the %d bytes before the cut character",
				i, len(got), utf8.ValidString(got), len(want))
		}
	}
}

// Bytes that are not UTF-8 are stored as U+FFFD, and the result still fits.
func TestLedgerClipsInvalidUTF8(t *testing.T) {
	t.Parallel()
	s := &spy{}
	l := ledger.New(s)
	c := ledger.Claim{Record: ledger.Record{Bucket: "b", Key: "k"}, Ident: "k"}
	for _, in := range []string{"ok \xff", strings.Repeat("\xfe", ledger.MaxText)} {
		if err := l.Fail(context.Background(), c, in, true); err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(s.cause) || len(s.cause) > ledger.MaxText || !strings.Contains(s.cause, "\uFFFD") {
			t.Errorf("cause %q… (%d bytes): want valid UTF-8 with U+FFFD, at most %d bytes", s.cause[:min(len(s.cause), 12)], len(s.cause), ledger.MaxText)
		}
	}
}
