package objstore_test

import (
	"errors"
	"os"
	"path/filepath"
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
