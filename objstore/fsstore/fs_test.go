package fsstore_test

import (
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func newFS(t *testing.T) (*fsstore.Backend, string) {
	dir := t.TempDir()
	b, err := fsstore.OpenBackend(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, dir := newFS(t)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: "file://" + dir, Uploads: b.Uploads}
	}})
}

func BenchmarkFS(b *testing.B) {
	objstoretest.Bench(b, func(b *testing.B) *objstore.Store {
		s, err := fsstore.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
