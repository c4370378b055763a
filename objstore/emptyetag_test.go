package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// An if-match with an empty ETag — IfMatch(""), what IfMatch(etag) becomes
// after a lookup that failed, or a Match of only quotes or spaces — never
// means "unconditional" (it used to overwrite whatever was there): every
// operation fails with ErrPreconditionFailed, saying why, and writes nothing.
func TestEmptyETagIsNeverUnconditional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, cond := range []objstore.Condition{
		objstore.IfMatch(""),
		objstore.IfMatch(`""`),
		objstore.IfMatch(`W/""`),
		objstore.IfMatch("  "),
		{Match: `""`},
		{Match: " "},
	} {
		if cond.IsZero() {
			t.Errorf("%#v.IsZero() = true; an empty ETag is not unconditional", cond)
		}
		s := objstore.New(mem.OpenBackend("empty-etag"), nil)
		v1, err := s.PutBytes(ctx, "k", []byte("v1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutBytes(ctx, "src", []byte("src"), nil); err != nil {
			t.Fatal(err)
		}
		_, putErr := s.PutBytes(ctx, "k", []byte("v2"), &objstore.PutOptions{If: cond})
		_, upErr := s.Upload(ctx, "k", bytes.NewReader(bytes.Repeat([]byte("u"), 10)), &objstore.UploadOptions{PutOptions: objstore.PutOptions{If: cond}, PartSize: 4})
		_, copyErr := s.Copy(ctx, "src", "k", cond)
		delErr := s.Delete(ctx, "k", cond)
		_, freshErr := s.PutBytes(ctx, "fresh", []byte("x"), &objstore.PutOptions{If: cond})
		for name, err := range map[string]error{"put": putErr, "upload": upErr, "copy": copyErr, "delete": delErr, "put of a missing key": freshErr} {
			if !errors.Is(err, objstore.ErrPreconditionFailed) || !strings.Contains(err.Error(), "empty ETag") {
				t.Errorf("%s with %#v: %v; want ErrPreconditionFailed naming the empty ETag", name, cond, err)
			}
		}
		if info, err := s.Head(ctx, "k"); err != nil || info.ETag != v1.ETag {
			t.Errorf("with %#v: k is now %+v, %v; want it untouched (ETag %s)", cond, info, err, v1.ETag)
		}
		if _, err := s.Head(ctx, "fresh"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("with %#v: fresh was written (%v)", cond, err)
		}
	}
}
