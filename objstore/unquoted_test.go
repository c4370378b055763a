package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// cephLike plays Ceph RGW 16.2 (measured on 16.2.15): If-Match is compared
// with the bare ETag, so the quoted form a client sends by default is
// refused with 412 even when it matches, and only the unquoted form
// (SetUnquotedIfMatch) is enforced; a conditional PUT that loses a race for
// an ETag the object really had is answered 500, which says nothing about
// whether it was applied; conditions on DELETE, copies and multipart
// completions are ignored.
type cephLike struct {
	objstore.Backend
	unquoted atomic.Bool
	mu       sync.Mutex
	seen     map[string]bool // ETags the objects have had
}

func newCephLike() *cephLike {
	return &cephLike{Backend: mem.NewBackend("ceph-like"), seen: map[string]bool{}}
}

func (b *cephLike) SetUnquotedIfMatch(on bool) bool { b.unquoted.Store(on); return true }

func (b *cephLike) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{}, false
}

// status500 is an answer 500: an unknown outcome, carrying its status as
// s3store's errors do.
type status500 struct{}

func (status500) Error() string       { return "HTTP 500 UnknownError" }
func (status500) HTTPStatusCode() int { return 500 }
func (status500) Unwrap() error       { return objstore.ErrAmbiguous }

func (b *cephLike) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if opts.If.Match != "" && !b.unquoted.Load() {
		return objstore.Info{}, fmt.Errorf("ceph-like: quoted If-Match: 412: %w", objstore.ErrPreconditionFailed)
	}
	info, err := b.Backend.Put(ctx, key, body, size, opts)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.seen[info.ETag] = true
	}
	if opts.If.Match != "" && errors.Is(err, objstore.ErrPreconditionFailed) && b.seen[opts.If.Match] {
		if _, herr := b.Backend.Head(ctx, key); herr == nil {
			return objstore.Info{}, status500{} // lost a race for an ETag the object had
		}
	}
	return info, err
}

func (b *cephLike) Delete(ctx context.Context, key string, _ objstore.Condition) error {
	return b.Backend.Delete(ctx, key, objstore.Condition{})
}

func (b *cephLike) Copy(ctx context.Context, src, dst string, _ objstore.Condition) (objstore.Info, error) {
	return b.Backend.Copy(ctx, src, dst, objstore.Condition{})
}

func (b *cephLike) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, _ objstore.Condition) (objstore.Info, error) {
	return b.Backend.CompleteMultipart(ctx, key, id, parts, objstore.Condition{})
}

// plainBackend hides cephLike's IfMatchUnquoter: a backend that can only
// send the quoted form.
type plainBackend struct{ objstore.Backend }

// The probe finds that a server honours If-Match only unquoted, says so, and
// leaves the backend sending that form; racing losers answered 500 are an
// unknown outcome it reports, not a failure of the probe; a Store applies a
// verdict that needs the unquoted form to its backend, and one whose backend
// cannot send it enforces no If-Match.
func TestProbeFindsUnquotedIfMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newCephLike()
	s := objstore.New(b, &objstore.Options{ProbeTTL: -1})
	rep, err := objstore.Probe(ctx, s, &objstore.ProbeOptions{Racers: 8, Rounds: 2})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	want := objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, IfMatchUnquoted: true}
	if rep.Capabilities != want {
		t.Fatalf("capabilities %+v, want %+v; checks %+v", rep.Capabilities, want, rep.Checks)
	}
	if !b.unquoted.Load() {
		t.Fatal("the probe left the backend sending If-Match quoted, the form this server refuses")
	}
	if !slices.Contains(rep.LosersStatus, "500") {
		t.Errorf("losers' statuses %v, want 500 among them", rep.LosersStatus)
	}
	findings := strings.Join(rep.Findings, "\n")
	for _, w := range []string{"unquoted", "500", "If-Match on a missing key answers"} {
		if !strings.Contains(findings, w) {
			t.Errorf("findings %q say nothing about %q", rep.Findings, w)
		}
	}
	// A compare-and-swap through the Store works.
	info, err := s.PutBytes(ctx, "doc", []byte("1"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBytes(ctx, "doc", []byte("2"), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)}); err != nil {
		t.Fatalf("a write with the current ETag: %v", err)
	}
	if _, err := s.PutBytes(ctx, "doc", []byte("3"), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)}); !errors.Is(err, objstore.ErrAmbiguous) && !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a write with a stale ETag: %v, want a refusal or an unknown outcome", err)
	}

	// A verdict given to a new Store is applied to its backend.
	b2 := newCephLike()
	s2 := objstore.New(b2, &objstore.Options{Capabilities: &want})
	if c, _ := s2.KnownCapabilities(); c != want || !b2.unquoted.Load() {
		t.Errorf("a Store given %+v: capabilities %+v, backend unquoted %v", want, c, b2.unquoted.Load())
	}
	// One whose backend cannot send the form enforces no If-Match.
	s3 := objstore.New(plainBackend{newCephLike()}, &objstore.Options{Capabilities: &want})
	if c, _ := s3.KnownCapabilities(); c.PutIfMatch || c.IfMatchUnquoted || !c.PutIfAbsent {
		t.Errorf("a backend that cannot unquote If-Match: capabilities %+v, want put-if-absent only", c)
	}
}
