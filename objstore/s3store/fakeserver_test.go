package s3store_test

import (
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// fakeS3 answers just enough of S3 to show how the backend reads answers no
// real server under test sends on demand: DeleteObjects errors whose key holds
// a raw CR (XML parsers read it as LF) or names a key not in the request, and
// listings that ignore encoding-type=url and name a folder with U+FFFD.
type fakeS3 struct {
	mu       sync.Mutex
	denied   map[string]bool // keys whose delete is refused
	stranger string          // a key DeleteObjects reports although not asked for
	deleted  []string        // keys deleted, in order
	folder   string          // a common prefix every listing names, as is
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strings.TrimPrefix(r.URL.Path, "/bkt/")
	switch {
	case r.Method == http.MethodPost && r.URL.Query().Has("delete"):
		var req struct {
			Objects []struct {
				Key string `xml:"Key"`
			} `xml:"Object"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := xml.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var out strings.Builder
		out.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult>`)
		for _, o := range req.Objects {
			if f.denied[o.Key] {
				// As servers do: the key raw, a CR included.
				out.WriteString("<Error><Key>" + o.Key + "</Key><Code>AccessDenied</Code><Message>denied</Message></Error>")
				continue
			}
			f.deleted = append(f.deleted, o.Key)
		}
		if f.stranger != "" {
			out.WriteString("<Error><Key>" + f.stranger + "</Key><Code>InternalError</Code><Message>oops</Message></Error>")
		}
		out.WriteString("</DeleteResult>")
		w.Header().Set("Content-Type", "application/xml")
		_, _ = io.WriteString(w, out.String())
	case r.Method == http.MethodDelete:
		k, _ := url.PathUnescape(key)
		if f.denied[k] {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>denied</Message></Error>`)
			return
		}
		f.deleted = append(f.deleted, k)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
		w.Header().Set("Content-Type", "application/xml")
		prefix := r.URL.Query().Get("prefix")
		out := `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bkt</Name><IsTruncated>false</IsTruncated>`
		if prefix == "" { // the folder is named only at the top: under it there is nothing
			out += "<Contents><Key>plain</Key><Size>1</Size><ETag>\"e\"</ETag></Contents><CommonPrefixes><Prefix>" + f.folder + "</Prefix></CommonPrefixes>"
		}
		_, _ = io.WriteString(w, out+"</ListBucketResult>")
	default:
		http.Error(w, "not faked: "+r.Method+" "+r.URL.String(), http.StatusNotImplemented)
	}
}

func fakeBackend(t *testing.T, f *fakeS3) *s3store.Backend {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	b, err := s3store.OpenBackend(t.Context(), "bkt", &s3store.Options{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: "test", SecretAccessKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A failure on a key holding CR is pinned on that key, never on its twin
// with LF (which was deleted); an error naming a key that was not asked for
// leaves none of the request's keys taken as deleted.
func TestDeleteBatchPinsFailuresOnTheRightKey(t *testing.T) {
	t.Parallel()
	f := &fakeS3{denied: map[string]bool{"dir/a\rb": true}}
	b := fakeBackend(t, f)
	failed, err := b.DeleteBatch(t.Context(), []string{"dir/a\rb", "dir/a\nb", "dir/c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed["dir/a\rb"] == nil {
		t.Fatalf("failed %q, want only dir/a\\rb", failed)
	}

	f = &fakeS3{stranger: "dir/ghost"}
	b = fakeBackend(t, f)
	failed, err = b.DeleteBatch(t.Context(), []string{"dir/x", "dir/y"})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 || failed["dir/x"] == nil || failed["dir/y"] == nil || !strings.Contains(failed["dir/x"].Error(), "not in the request") {
		t.Fatalf("failed %q, want both keys failed naming the stranger", failed)
	}
}

// A listing that names a folder with U+FFFD (a server ignoring
// encoding-type=url) is refused, as such a key is, never returned as a
// folder that does not exist.
func TestListRefusesAFolderNameWithReplacementCharacters(t *testing.T) {
	t.Parallel()
	b := fakeBackend(t, &fakeS3{folder: "dir\uFFFDx/"})
	_, err := b.List(t.Context(), "", "", objstore.ListOptions{PageSize: 100, Delimiter: "/"})
	if !errors.Is(err, objstore.ErrNotSupported) || !strings.Contains(err.Error(), "folder") {
		t.Fatalf("listing with a mangled folder name: %v, want ErrNotSupported", err)
	}
	b = fakeBackend(t, &fakeS3{folder: "dir/"})
	page, err := b.List(t.Context(), "", "", objstore.ListOptions{PageSize: 100, Delimiter: "/"})
	if err != nil || len(page.Entries) != 2 {
		t.Fatalf("a plain folder: %+v", page)
	}
}

// If-Match carries the ETag quoted, as HTTP has it, unless the condition
// says to send it bare (the only form Ceph RGW 16.2 honours): then it is
// sent bare on PUT, DELETE, copies and multipart completions.
func TestIfMatchQuotedOrBare(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("If-Match"))
		mu.Unlock()
		w.Header().Set("ETag", `"e"`)
		switch {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.Header.Get("X-Amz-Copy-Source") != "":
			_, _ = io.WriteString(w, `<CopyObjectResult><ETag>"e"</ETag></CopyObjectResult>`)
		case r.Method == http.MethodPost:
			_, _ = io.WriteString(w, `<CompleteMultipartUploadResult><ETag>"e-1"</ETag></CompleteMultipartUploadResult>`)
		}
	}))
	t.Cleanup(srv.Close)
	b, err := s3store.OpenBackend(t.Context(), "bkt", &s3store.Options{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		AccessKeyID: "test", SecretAccessKey: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cond := t.Context(), objstore.IfMatch("0123abcd")
	send := func() {
		if _, err := b.Put(ctx, "k", strings.NewReader("x"), 1, objstore.PutOptions{If: cond}); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, "k", cond); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Copy(ctx, "src", "k", cond); err != nil {
			t.Fatal(err)
		}
		if _, err := b.CompleteMultipart(ctx, "k", "id", []objstore.Part{{Number: 1, ETag: "p"}}, cond); err != nil {
			t.Fatal(err)
		}
	}
	send()
	cond.Unquoted = true
	send()
	want := []string{`PUT "0123abcd"`, `DELETE "0123abcd"`, `PUT "0123abcd"`, `POST "0123abcd"`,
		`PUT 0123abcd`, `DELETE 0123abcd`, `PUT 0123abcd`, `POST 0123abcd`}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("If-Match headers sent:\n got %q\nwant %q", got, want)
	}
}

// A conditional delete answered 412 is ErrNotFound if the key is missing
// (SeaweedFS answers 412, not 404, for a missing key; the contract is
// ErrNotFound), and stays ErrPreconditionFailed if the object is there.
func TestConditionalDeleteOfMissingKeyAnswered412(t *testing.T) {
	t.Parallel()
	for _, exists := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodDelete:
				w.WriteHeader(http.StatusPreconditionFailed)
				_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>no</Message></Error>`)
			case r.Method == http.MethodHead && exists:
				w.Header().Set("ETag", `"other"`)
			default:
				w.WriteHeader(http.StatusNotFound)
			}
		}))
		b, err := s3store.OpenBackend(t.Context(), "bkt", &s3store.Options{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
			AccessKeyID: "test", SecretAccessKey: "test"})
		if err != nil {
			t.Fatal(err)
		}
		err = b.Delete(t.Context(), "k", objstore.IfMatch("0123"))
		want := objstore.ErrNotFound
		if exists {
			want = objstore.ErrPreconditionFailed
		}
		if !errors.Is(err, want) {
			t.Errorf("object there: %v; conditional delete answered 412: %v, want %v", exists, err, want)
		}
		srv.Close()
	}
}
