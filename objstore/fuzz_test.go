package objstore_test

import (
	"iter"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/objstore"
)

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a//b", "../x", "a/./b", "ünï/日本", "a\x00", "/abs", "dir/", "%2F+ ", "new\nline", "tab\t/\x1b[2J\x7f\u009b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := objstore.ValidateKey(key)
		if err != nil {
			if !strings.Contains(err.Error(), "key") {
				t.Fatalf("error does not name the key: %v", err)
			}
			return
		}
		if key == "" || len(key) > objstore.MaxKeyLen || !utf8.ValidString(key) || strings.HasPrefix(key, "/") ||
			strings.HasSuffix(key, "/") || strings.Contains(key, "//") || strings.ContainsRune(key, 0) {
			t.Fatalf("accepted %q", key)
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("accepted dot segment in %q", key)
			}
		}
	})
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"s3://b/p?endpoint=http://x", "file:///d", "rel/dir", "mem://n", "://", "s3://%zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := objstore.ParseURL(raw)
		if err == nil && u.Scheme == "" {
			t.Fatalf("parsed %q without a scheme", raw)
		}
	})
}

// reference lists keys the obvious way: filter, then roll up, then page.
func reference(keys []string, prefix, after, delim string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) || k <= after {
			continue
		}
		if delim != "" {
			if i := strings.Index(k[len(prefix):], delim); i >= 0 {
				cp := k[:len(prefix)+i+len(delim)]
				// A prefix at or before start-after is not returned (S3, MinIO).
				if !seen[cp] && cp > after {
					seen[cp] = true
					out = append(out, cp+"/")
				}
				continue
			}
		}
		out = append(out, k)
	}
	return out
}

func FuzzPageFromScanner(f *testing.F) {
	f.Add("a,a/b,a/c/d,b,b/e", "", "", "/", 2)
	f.Add("x/1,x/2,x/3,y", "x/", "x/1", "", 1)
	f.Add("a-b,a.b,a/b,a0", "a", "", "/", 1)
	f.Fuzz(func(t *testing.T, keyList, prefix, after, delim string, pageSize int) {
		if pageSize <= 0 || pageSize > 50 || len(delim) > 3 {
			return
		}
		keys := strings.Split(keyList, ",")
		slices.Sort(keys)
		keys = slices.Compact(keys)
		scan := func(p, a, skip string) iter.Seq2[objstore.Info, error] {
			return func(yield func(objstore.Info, error) bool) {
				for _, k := range keys {
					if strings.HasPrefix(k, p) && k > a && (skip == "" || !strings.HasPrefix(k, skip)) {
						if !yield(objstore.Info{Key: k}, nil) {
							return
						}
					}
				}
			}
		}
		var got []string
		cursor := ""
		for range len(keys) + 2 {
			page, err := objstore.PageFromScanner(scan, prefix, cursor, objstore.ListOptions{StartAfter: after, Delimiter: delim, PageSize: pageSize})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Entries) > pageSize {
				t.Fatalf("page of %d > %d", len(page.Entries), pageSize)
			}
			for _, e := range page.Entries {
				if e.IsPrefix {
					got = append(got, e.Key+"/")
				} else {
					got = append(got, e.Key)
				}
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		want := reference(keys, prefix, after, delim)
		if !slices.Equal(got, want) {
			t.Fatalf("keys %q prefix %q after %q delim %q page %d:\n got %q\nwant %q", keys, prefix, after, delim, pageSize, got, want)
		}
	})
}
