package mem_test

import (
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b := mem.OpenBackend(t.Name())
		return objstoretest.Instance{Store: objstore.New(b, nil), Uploads: b.Uploads}
	}})
}

// The prefix wrapper must keep every guarantee of the store under it.
func TestConformancePrefixed(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b := mem.OpenBackend(t.Name())
		p, err := objstore.Prefixed(b, "tenant/a")
		if err != nil {
			t.Fatal(err)
		}
		return objstoretest.Instance{Store: objstore.New(p, nil), Uploads: b.Uploads}
	}})
}

func BenchmarkMem(b *testing.B) {
	objstoretest.Bench(b, func(b *testing.B) *objstore.Store { return objstore.New(mem.OpenBackend(b.Name()), nil) })
}
