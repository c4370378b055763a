package s3store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// A server whose disks are full answers a write 507 (MinIO:
// XMinioStorageFull): the write was refused, not applied, and retrying
// cannot help: ErrUnwritable, never ErrAmbiguous.
func TestFullServerIsUnwritable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInsufficientStorage)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>XMinioStorageFull</Code>` +
			`<Message>Storage backend has reached its minimum free drive threshold. Please delete a few objects to proceed.</Message></Error>`))
	}))
	defer srv.Close()
	ctx := context.Background()
	b, err := s3store.OpenBackend(ctx, "full", &s3store.Options{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.New(b, nil)
	defer s.Close()
	// A plain write, and a conditional one (which first probes the server,
	// with a write that the same answer refuses).
	for _, opts := range []*objstore.PutOptions{nil, {If: objstore.IfAbsent()}} {
		_, err = s.PutBytes(ctx, "k", []byte("v"), opts)
		if !errors.Is(err, objstore.ErrUnwritable) || errors.Is(err, objstore.ErrAmbiguous) || !strings.Contains(err.Error(), "free space on the server") {
			t.Fatalf("put to a full server: %v, want ErrUnwritable (not ambiguous) saying to free space", err)
		}
	}
}
