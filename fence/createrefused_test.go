package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A fenced write of a new object that the store refuses to create although
// the key reads as absent (SeaweedFS, for a key that is also a folder; played
// by faulty, as no server the suite runs does it) fails with
// objstore.ErrCreateRefused; it used to give up "after 20 attempts under
// concurrent writes" (ErrConflict), blaming writers that did not exist.
func TestFencedCreateRefusedIsNotConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(faulty.New(mem.OpenBackend("fence-folder"), &faulty.Options{Quirks: faulty.Quirks{FolderRefusesCreate: true}}), nil)
	if _, err := s.PutBytes(ctx, "out/inside", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	_, err := fence.PutBytes(ctx, s, "out", []byte("result"), 7, nil)
	if !errors.Is(err, objstore.ErrCreateRefused) || errors.Is(err, objstore.ErrConflict) {
		t.Errorf("fenced write of a key that is a folder: %v, want objstore.ErrCreateRefused, not ErrConflict", err)
	}
}
