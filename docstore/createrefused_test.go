package docstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A document the store refuses to create although it reads as absent
// (SeaweedFS, for a key that is also a folder; played by faulty, as no server
// the suite runs does it) fails with objstore.ErrCreateRefused after a few
// reads, never with ErrContention ("gave up after repeated conflicting
// writes … raise Options.MaxAttempts"), which it used to, after every attempt.
func TestCreateRefusedIsNotContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(faulty.New(mem.OpenBackend("doc-folder"), &faulty.Options{Quirks: faulty.Quirks{FolderRefusesCreate: true}}), nil)
	if _, err := s.PutBytes(ctx, "reg/inside.json", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	d := docstore.New(s, &docstore.Options{MaxAttempts: 10})
	calls := map[string]func() error{
		"CreateBytes": func() error { _, err := d.CreateBytes(ctx, "reg", []byte(`{"n":1}`)); return err },
		"UpdateJSON": func() error {
			_, _, err := d.UpdateJSON(ctx, "reg", func([]byte, docstore.Meta) ([]byte, error) { return []byte(`{"n":1}`), nil })
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, objstore.ErrCreateRefused) || errors.Is(err, docstore.ErrContention) || errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Errorf("%s of a document whose key is a folder: %v, want objstore.ErrCreateRefused, not contention", name, err)
		}
	}
}
