package s3store_test

import (
	"context"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestConformanceMinIO(t *testing.T) {
	ep := testenv.S3(t)
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, url := testenv.NewBucket(t, ep)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: url, Env: ep.Env(), Uploads: func() int {
			n, err := b.Uploads(context.Background())
			if err != nil {
				t.Errorf("listing multipart uploads: %v", err)
			}
			return n
		}}
	}})
}

func BenchmarkMinIO(b *testing.B) {
	ep := testenv.S3(b)
	objstoretest.Bench(b, func(b *testing.B) *objstore.Store {
		bk, _ := testenv.NewBucket(b, ep)
		return objstore.New(bk, nil)
	})
}
