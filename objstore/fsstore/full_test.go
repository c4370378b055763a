package fsstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
)

// TestFullDisk: on a file system with no space left, every write that stores
// data fails with ErrUnwritable (not transient: callers' retry loops give up)
// and a message that says what to do; reads and deletes still work, and once
// space is freed, writes do too.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := testenv.SmallDisk(t, 1<<20)
	s, err := fsstore.Open(dir, &fsstore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutBytes(ctx, "kept", []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}
	free := testenv.FillDisk(t, dir)
	big := bytes.Repeat([]byte("x"), 64<<10)
	up, upErr := s.Backend().CreateMultipart(ctx, "mp", objstore.PutOptions{})
	writes := []struct {
		name string
		fn   func() error
	}{
		{"put", func() error { _, err := s.PutBytes(ctx, "new", big, nil); return err }},
		{"put if absent", func() error {
			_, err := s.PutBytes(ctx, "new", big, &objstore.PutOptions{If: objstore.IfAbsent()})
			return err
		}},
		{"copy", func() error { _, err := s.Copy(ctx, "kept", "copy", objstore.Condition{}); return err }},
		{"upload part", func() error {
			if upErr != nil {
				return upErr // creating the upload was refused already
			}
			_, err := s.Backend().UploadPart(ctx, "mp", up, 1, bytes.NewReader(big), int64(len(big)))
			return err
		}},
	}
	for _, w := range writes {
		err := w.fn()
		if !errors.Is(err, objstore.ErrUnwritable) || !strings.Contains(err.Error(), "is full: free space and retry") {
			t.Errorf("%s on a full disk: %v, want ErrUnwritable saying the disk is full", w.name, err)
		}
	}
	if got, _, err := s.GetBytes(ctx, "kept"); err != nil || string(got) != "kept" {
		t.Fatalf("read on a full disk: %q, %v", got, err)
	}
	free()
	if _, err := s.PutBytes(ctx, "new", big, nil); err != nil {
		t.Fatalf("put after space was freed: %v", err)
	}
	if err := s.Delete(ctx, "new", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
}
