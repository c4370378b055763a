package s3store_test

import (
	"fmt"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// A copy is one CopyObject request (a folder rename sends one per object;
// a HEAD after each would halve its rate), and its Info carries the copy's
// ETag. Through a key prefix (s3://bucket/prefix), DeleteMany still deletes
// in batches: one DeleteObjects request for the keys, not one DELETE each.
func TestRequestsPerCopyAndBatchDelete(t *testing.T) {
	t.Parallel()
	for _, server := range testenv.S3ServerNames() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			ep := testenv.S3Server(t, server)
			_, url := testenv.NewBucket(t, ep)
			proxy, b := testenv.ThroughFaultProxy(t, ep, bucketOf(t, url))
			sent := proxy.Stats().Requests
			requests := func() int { // since the last call
				n := proxy.Stats().Requests
				n, sent = n-sent, n
				return n
			}
			s := objstore.New(b, nil)
			src, err := s.PutBytes(ctx, "src/a", []byte("copy me"), nil)
			if err != nil {
				t.Fatal(err)
			}
			requests()
			info, err := s.Copy(ctx, "src/a", "dst/a", objstore.Condition{})
			if err != nil {
				t.Fatal(err)
			}
			if n := requests(); n != 1 {
				t.Errorf("a copy sent %d requests, want one (CopyObject)", n)
			}
			if info.ETag != src.ETag || info.Key != "dst/a" {
				t.Errorf("copy's Info: key %q etag %q, want dst/a %q", info.Key, info.ETag, src.ETag)
			}
			if h, err := s.Head(ctx, "dst/a"); err != nil || h.ETag != src.ETag || h.Size != 7 {
				t.Errorf("the copy: %+v %v", h, err)
			}

			pb, err := objstore.Prefixed(b, "tenant/")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := pb.(objstore.BatchDeleter); !ok {
				t.Fatalf("a prefixed s3 backend (%T) does not delete in batches", pb)
			}
			ps := objstore.New(pb, nil)
			var keys []string
			for i := range 30 {
				k := fmt.Sprintf("many/%02d", i)
				if _, err := ps.PutBytes(ctx, k, []byte("x"), nil); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			// The same relative key outside the prefix must survive.
			if _, err := s.PutBytes(ctx, "many/00", []byte("keep"), nil); err != nil {
				t.Fatal(err)
			}
			requests()
			failed, err := ps.DeleteMany(ctx, append(keys, "many/never-existed"), 4)
			if err != nil || len(failed) != 0 {
				t.Fatalf("DeleteMany: %v %v", failed, err)
			}
			if n := requests(); n != 1 {
				t.Errorf("DeleteMany of 31 keys through a prefix sent %d requests, want one (DeleteObjects)", n)
			}
			if left, err := ps.ListAll(ctx, "", nil); err != nil || len(left) != 0 {
				t.Errorf("left under the prefix: %v %v", left, err)
			}
			if left, err := s.ListAll(ctx, "many/", nil); err != nil || len(left) != 1 {
				t.Errorf("outside the prefix: %v %v, want many/00 kept", left, err)
			}
		})
	}
}
