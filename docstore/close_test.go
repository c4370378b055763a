package docstore_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// hangingPuts is a store whose writes hang until their context ends, as
// through a blackholed connection.
type hangingPuts struct{ objstore.Backend }

func (h hangingPuts) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	<-ctx.Done()
	return objstore.Info{}, ctx.Err()
}

// A caller whose deadline passes while its write is being committed returns
// at once with ErrAmbiguous; the commit it gave up on runs on until Close,
// which cancels it and returns only once no committer runs (the package's
// TestMain fails on a goroutine left behind); updates after Close fail with
// ErrClosed.
func TestCloseEndsCommitsCallersGaveUpOn(t *testing.T) {
	t.Parallel()
	d := docstore.New(objstore.New(hangingPuts{mem.OpenBackend("")}, nil), &docstore.Options{Strategy: docstore.CAS})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := d.UpdateJSON(ctx, "doc.json", func(cur []byte, _ docstore.Meta) ([]byte, error) { return []byte(`{"a":1}`), nil })
	if !errors.Is(err, objstore.ErrAmbiguous) {
		t.Fatalf("update through a hanging write: %v, want ErrAmbiguous", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // the commit's own timeout is a minute
		t.Fatal("Close did not end the hanging commit")
	}
	_, _, err = d.UpdateJSON(context.Background(), "doc.json", func(cur []byte, _ docstore.Meta) ([]byte, error) { return []byte(`{}`), nil })
	if !errors.Is(err, docstore.ErrClosed) {
		t.Fatalf("update after Close: %v, want ErrClosed", err)
	}
}
