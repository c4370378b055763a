package objstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/objstore"
)

func TestSplitObjectURL(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "store", ".cairn"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, store, key string }{
		{"s3://b/a/b.json?endpoint=http://x:9000&path_style=true", "s3://b?endpoint=http://x:9000&path_style=true", "a/b.json"},
		{"mem://n/k", "mem://n", "k"},
		{"file://" + dir + "/store/meta/reg.json", "file://" + dir + "/store", "meta/reg.json"},
		{dir + "/loose/file.txt", "file://" + dir + "/loose", "file.txt"},
	}
	for _, tc := range tests {
		s, k, err := objstore.SplitObjectURL(tc.in)
		if err != nil || s != tc.store || k != tc.key {
			t.Errorf("SplitObjectURL(%q) = %q, %q, %v; want %q, %q", tc.in, s, k, err, tc.store, tc.key)
		}
	}
	for _, bad := range []string{"s3://bucket", "s3://bucket/", "file:///", ""} {
		if _, _, err := objstore.SplitObjectURL(bad); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("SplitObjectURL(%q): %v, want ErrInvalidURL", bad, err)
		}
	}
}

// TestParseURLNeverGuessesAPath: a string that starts with a URL scheme is
// never a local path (an unset $BUCKET in "s3://$BUCKET/reports/f.txt" once
// wrote ./s3:/reports/f.txt and succeeded), and a URL without its bucket or
// store name is refused with an error naming the missing part.
func TestParseURLNeverGuessesAPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"s3:///reports/f.txt", "has no bucket"},
		{"s3://", "has no bucket"},
		{"mem:///k", "has no store name"},
		{"s3:", `starts with the URL scheme "s3:"`},
		{"s3:/reports/f.txt", `starts with the URL scheme "s3:"`},
		{"mem:x", `starts with the URL scheme "mem:"`},
	} {
		_, err := objstore.ParseURL(tc.in)
		if !errors.Is(err, objstore.ErrInvalidURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalidURL saying %q", tc.in, err, tc.want)
		}
		if _, _, err := objstore.SplitObjectURL(tc.in); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("SplitObjectURL(%q) = %v; want ErrInvalidURL", tc.in, err)
		}
	}
	for _, ok := range []string{"C:/data", "relative/dir", "./s3:x", "/abs/with:colon", "file:///abs"} {
		if u, err := objstore.ParseURL(ok); err != nil || u.Scheme != "file" {
			t.Errorf("ParseURL(%q) = %v, %v; want a file URL", ok, u, err)
		}
	}
}
