package objstore

import (
	"iter"
	"strings"
)

// Scanner yields, in UTF-8 byte order, the objects whose keys start with prefix,
// are strictly greater than after, and do not start with skip (unless skip is "").
// Backends that keep keys themselves (mem, fs) implement one and build List on
// PageFromScanner, so delimiter roll-up and paging behave exactly alike.
type Scanner func(prefix, after, skip string) iter.Seq2[Info, error]

// PageFromScanner returns the page of a listing that follows cursor, rolling keys
// up into common prefixes when opts.Delimiter is set, as S3's ListObjectsV2 does.
func PageFromScanner(scan Scanner, prefix, cursor string, opts ListOptions) (ListPage, error) {
	size := opts.PageSize
	if size <= 0 {
		size = 1000
	}
	after, skip := opts.StartAfter, ""
	if cursor != "" {
		kind, val := cursor[:2], cursor[2:]
		if val > after {
			after = val
		}
		if kind == "p:" {
			skip = val
		}
	}
	var page ListPage
	for {
		rolled := ""
		for info, err := range scan(prefix, after, skip) {
			if err != nil {
				return ListPage{}, err
			}
			if d := opts.Delimiter; d != "" {
				if i := strings.Index(info.Key[len(prefix):], d); i >= 0 {
					// A common prefix that sorts at or before the start position
					// is not returned, nor is anything under it (S3's rule: it
					// keeps paging by prefix from repeating the prefix).
					rolled = info.Key[:len(prefix)+i+len(d)]
					if rolled > after {
						page.Entries = append(page.Entries, Info{Key: rolled, IsPrefix: true})
					}
					break
				}
			}
			page.Entries = append(page.Entries, info)
			if len(page.Entries) == size {
				page.Next = "k:" + info.Key
				return page, nil
			}
		}
		if rolled == "" {
			return page, nil
		}
		if len(page.Entries) == size {
			page.Next = "p:" + rolled
			return page, nil
		}
		after, skip = max(after, rolled), rolled
	}
}
