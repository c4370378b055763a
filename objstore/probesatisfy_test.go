package objstore_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// refuser plays a server that answers 412 to requests that meet their
// condition too, or claims a conditional delete it did not do. No server run
// here does this; the probe must not call any of it "enforced", and it used to
// (it only checked that a violating request was refused).
type refuser struct {
	objstore.Backend
	copies, completions, ifMatchPuts, deletes bool // refuse every conditional one
	fakeDeletes                               bool // a conditional delete that meets its condition answers 204 and deletes nothing
}

func (b *refuser) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{}, false // must be probed
}

var errRefused = fmt.Errorf("refuser: 412: %w", objstore.ErrPreconditionFailed)

func (b *refuser) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	if b.copies && !cond.IsZero() {
		return objstore.Info{}, errRefused
	}
	return b.Backend.Copy(ctx, src, dst, cond)
}

func (b *refuser) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	if b.completions && !cond.IsZero() {
		return objstore.Info{}, errRefused
	}
	return b.Backend.CompleteMultipart(ctx, key, id, parts, cond)
}

func (b *refuser) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if b.ifMatchPuts && opts.If.Match != "" {
		return objstore.Info{}, errRefused
	}
	return b.Backend.Put(ctx, key, body, size, opts)
}

func (b *refuser) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	if !cond.IsZero() {
		switch {
		case b.deletes:
			return errRefused
		case b.fakeDeletes:
			info, err := b.Backend.Head(ctx, key)
			if err != nil {
				return err
			}
			if info.ETag != cond.Match {
				return errRefused
			}
			return nil // "deleted", and nothing was
		}
	}
	return b.Backend.Delete(ctx, key, cond)
}

// A condition is enforced only if a request that violates it is refused AND
// one that meets it succeeds and takes effect: a server that refuses every
// conditional copy, completion, If-Match write or delete enforces nothing a
// caller can use.
func TestProbeRequiresSatisfyingRequestsToSucceed(t *testing.T) {
	t.Parallel()
	type want map[string]string // check -> what its outcome must say ("" : enforced)
	for _, tc := range []struct {
		name string
		b    *refuser
		want want
	}{
		{"refuses every conditional copy", &refuser{copies: true}, want{
			"copy-if-absent": "a copy onto a free key", "copy-if-match": "a copy onto the destination with its current ETag",
			"put-if-absent": "", "multipart-if-absent": ""}},
		{"refuses every conditional completion", &refuser{completions: true}, want{
			"multipart-if-absent": "completing an upload of a free key", "multipart-if-match": "completing an upload with the object's current ETag",
			"copy-if-absent": ""}},
		{"refuses every If-Match write", &refuser{ifMatchPuts: true}, want{
			"put-if-match": "current ETag", "racing-updates": "refuses even the current ETag", "put-if-absent": "", "racing-creates": ""}},
		{"refuses every conditional delete", &refuser{deletes: true}, want{
			"delete-if-match": "a delete with the current ETag failed", "put-if-match": ""}},
		{"claims conditional deletes it does not do", &refuser{fakeDeletes: true}, want{
			"delete-if-match": "succeeded and left the object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.b.Backend = mem.OpenBackend("refuser")
			rep, err := objstore.Probe(context.Background(), objstore.New(tc.b, &objstore.Options{ProbeTTL: -1}), &objstore.ProbeOptions{Racers: 4, Rounds: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rep.Checks {
				w, ok := tc.want[c.Name]
				if !ok {
					continue
				}
				if w == "" && !c.Enforced {
					t.Errorf("%s: not enforced (%s), want enforced", c.Name, c.Outcome)
				}
				if w != "" && (c.Enforced || !strings.Contains(c.Outcome, w)) {
					t.Errorf("%s: enforced=%v %q, want not enforced saying %q", c.Name, c.Enforced, c.Outcome, w)
				}
			}
		})
	}
}
