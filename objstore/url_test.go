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

// TestURLNeverClimbsOutOfItsRoot: a ".." segment, in every form a key can
// bring into a URL, is refused before anything is cleaned (file:// URLs were
// cleaned first, so "file:///srv/mirror/../../x" wrote two levels above the
// mirror), and so are the fragments and second '?' that a key holding '#'
// or '?' leaves.
func TestURLNeverClimbsOutOfItsRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ in, says string }{
		{"file:///srv/mirror/../../x", `".." segment`},
		{"file:///srv/mirror/..%2F..%2Fescaped.txt", `".." segment`},
		{"file:///srv/mirror/..%2f..%2fescaped.txt", `".." segment`},
		{"file:///srv/mirror/%2E%2E/x", `".." segment`},
		{"file:///srv/mirror/%2e%2E/x", `".." segment`},
		{"file:///srv/mirror/.%2e/x", `".." segment`},
		{"file:///srv/mirror/%2E./x", `".." segment`},
		{"file:///srv/mirror/..%5Cx", `".." segment`},
		{`file:///srv/mirror/..\x`, `".." segment`},
		{"file:///srv/store/../victims/", `".." segment`},
		{"file:///srv/mirror/..", `".." segment`},
		{"file://../srv", `".." segment`},
		{"FILE:///srv/mirror/../x", `".." segment`},
		{dir + "/mirror/../x", `".." segment`},
		{"../x", `".." segment`},
		{"mirror/../../x", `".." segment`},
		{`mirror\..\x`, `".." segment`},
		{"s3://b/a/../k", `".." segment`},
		{"s3://b/%2E%2E/k?endpoint=http://127.0.0.1:1", `".." segment`},
		{"mem://n/../k", `".." segment`},
		{"mem://../k", `".." segment`},
		{"file:///srv/mirror/a#frag", "has a '#'"},
		{"s3://b/k#?endpoint=http://127.0.0.1:1", "has a '#'"},
		{"s3://b/k?x?endpoint=http://127.0.0.1:1", "second '?'"},
		{"s3://b/k??endpoint=http://127.0.0.1:1", "second '?'"},
	} {
		_, err := objstore.ParseURL(tc.in)
		if !errors.Is(err, objstore.ErrInvalidURL) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalidURL saying %q", tc.in, err, tc.says)
		}
		if s, k, err := objstore.SplitObjectURL(tc.in); !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("SplitObjectURL(%q) = %q, %q, %v; want ErrInvalidURL", tc.in, s, k, err)
		}
		if !strings.HasPrefix(tc.in, "s3:") { // s3 would look for credentials
			if s, err := objstore.Open(t.Context(), tc.in, nil); !errors.Is(err, objstore.ErrInvalidURL) {
				if s != nil {
					s.Close()
				}
				t.Errorf("Open(%q): %v; want ErrInvalidURL", tc.in, err)
			}
		}
	}
	// Dots inside a name, and an encoded percent, are names: nothing climbs.
	for _, tc := range []struct{ in, key string }{
		{"file://" + dir + "/m/..x", "..x"},
		{"file://" + dir + "/m/x..", "x.."},
		{"file://" + dir + "/m/...", "..."},
		{"file://" + dir + "/m/%252E%252E", "%2E%2E"},
		{"s3://b/a..b/c", "a..b/c"},
		{dir + "/m/..x", "..x"},
	} {
		_, k, err := objstore.SplitObjectURL(tc.in)
		if err != nil || k != tc.key {
			t.Errorf("SplitObjectURL(%q) = key %q, %v; want %q", tc.in, k, err, tc.key)
		}
	}
}

// TestFileObjectURLKeepsItsKey: a file:// object URL whose path cleaning
// would drop a segment ("." or empty, or a trailing "/") is refused rather
// than read as another key.
func TestFileObjectURLKeepsItsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, in := range []string{
		"file://" + dir + "/m/./k",
		"file://" + dir + "/m//k",
		"file://" + dir + "/m/k/",
		"file://" + dir + "/m/%2E/k",
	} {
		if s, k, err := objstore.SplitObjectURL(in); !errors.Is(err, objstore.ErrInvalidURL) || !strings.Contains(err.Error(), "segment") {
			t.Errorf("SplitObjectURL(%q) = %q, %q, %v; want ErrInvalidURL naming the segment", in, s, k, err)
		}
	}
	// A local path is a path: the shell's "./" and "//" mean what they do.
	for _, in := range []string{dir + "/m/./k", dir + "/m//k"} {
		if _, k, err := objstore.SplitObjectURL(in); err != nil || k != "k" {
			t.Errorf("SplitObjectURL(%q) = %q, %v; want key k", in, k, err)
		}
	}
}

// A mem:// URL has no parameters: a '?' is a key's, and is refused rather
// than dropped.
func TestMemURLRefusesParameters(t *testing.T) {
	t.Parallel()
	s, err := objstore.Open(t.Context(), "mem://q?x", nil)
	if !errors.Is(err, objstore.ErrInvalidURL) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open(mem://q?x): %v; want ErrInvalidURL", err)
	}
}
