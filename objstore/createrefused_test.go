package objstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// folderStore plays SeaweedFS, which answers 412 to a write-once create of
// key K while K is (or was) also a folder, although K reads as absent. No
// server run by the suite does this, so faulty plays it.
func folderStore(name string) *objstore.Store {
	return objstore.New(faulty.New(mem.OpenBackend(name), &faulty.Options{Quirks: faulty.Quirks{FolderRefusesCreate: true}}), nil)
}

// A write-once create refused although the key reads as absent is
// ErrCreateRefused, which says so; it is not ErrPreconditionFailed ("someone
// else created it"), which it used to be. A create of a key that exists is
// still ErrPreconditionFailed.
func TestCreateRefusedOnAbsentKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := folderStore("create-refused")
	for _, k := range []string{"a/inside", "exists"} {
		if _, err := s.PutBytes(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	creates := map[string]func() error{
		"put": func() error {
			_, err := s.PutBytes(ctx, "a", []byte("x"), &objstore.PutOptions{If: objstore.IfAbsent()})
			return err
		},
		"upload": func() error {
			_, err := s.Upload(ctx, "a", strings.NewReader("x"), &objstore.UploadOptions{PutOptions: objstore.PutOptions{If: objstore.IfAbsent()}})
			return err
		},
	}
	for name, create := range creates {
		err := create()
		if !errors.Is(err, objstore.ErrCreateRefused) || errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Errorf("%s if-absent of a key that is a folder: %v, want ErrCreateRefused and not ErrPreconditionFailed", name, err)
		} else if !strings.Contains(err.Error(), `refused to create "a" although it reads as absent`) {
			t.Errorf("%s: the error does not say what happened: %v", name, err)
		}
	}
	_, err := s.PutBytes(ctx, "exists", []byte("y"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if !errors.Is(err, objstore.ErrPreconditionFailed) || errors.Is(err, objstore.ErrCreateRefused) {
		t.Errorf("if-absent of a key that exists: %v, want ErrPreconditionFailed", err)
	}
}
