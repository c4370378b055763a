package s3store

import (
	"errors"
	"net/url"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
)

func FuzzOptionsFromURL(f *testing.F) {
	for _, s := range []string{"s3://b/p?endpoint=http://127.0.0.1:9000&path_style=true", "s3://b", "s3://", "s3://b?region=eu&x=1", "s3://b/%2F?endpoint=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		bucket, _, prefix, err := optionsFromURL(u)
		if err != nil {
			if !errors.Is(err, objstore.ErrInvalidURL) {
				t.Fatalf("error %v does not wrap ErrInvalidURL", err)
			}
			return
		}
		if bucket == "" {
			t.Fatalf("accepted %q without a bucket", raw)
		}
		_ = prefix
	})
}

func TestCopySourceEscaping(t *testing.T) {
	for key, want := range map[string]string{
		"a/b c+d%e.txt": "bkt/a/b%20c%2Bd%25e.txt",
		"ünï/日":         "bkt/%C3%BCn%C3%AF/%E6%97%A5",
		"a~b_c-d.e":     "bkt/a~b_c-d.e",
	} {
		if got := copySource("bkt", key); got != want {
			t.Errorf("copySource(%q) = %q, want %q", key, got, want)
		}
	}
}
