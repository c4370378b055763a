package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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
// (Condition.Unquoted) is enforced; a conditional PUT that loses a race for
// an ETag the object really had is answered 500, which says nothing about
// whether it was applied; conditions on DELETE, copies and multipart
// completions are ignored.
type cephLike struct {
	objstore.Backend
	mu     sync.Mutex
	seen   map[string]bool // ETags the objects have had
	quoted atomic.Int64    // If-Match PUTs sent quoted
}

func newCephLike() *cephLike {
	return &cephLike{Backend: mem.OpenBackend("ceph-like"), seen: map[string]bool{}}
}

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
	if opts.If.Match != "" && !opts.If.Unquoted {
		b.quoted.Add(1)
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

// The probe finds that a server honours If-Match only unquoted and says so;
// racing losers answered 500 are an unknown outcome it reports, not a
// failure of the probe; a Store then sends If-Match unquoted, whether it
// probed or was given the verdict — and never by changing the backend under
// other Stores: one probing while another writes leaves the other's form
// alone.
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

	// A verdict given to a new Store is used, on a backend another Store
	// probes at the same time.
	b2 := newCephLike()
	s2 := objstore.New(b2, &objstore.Options{Capabilities: &want})
	probing := objstore.New(b2, &objstore.Options{ProbeTTL: -1})
	done := make(chan error)
	go func() {
		_, err := objstore.Probe(ctx, probing, &objstore.ProbeOptions{Racers: 4, Rounds: 1})
		done <- err
	}()
	for i := range 50 {
		info, err := s2.PutBytes(ctx, "doc2", []byte(strconv.Itoa(i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s2.PutBytes(ctx, "doc2", []byte("next"), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)}); err != nil {
			t.Fatalf("a Store given %+v, write %d with the current ETag: %v", want, i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
