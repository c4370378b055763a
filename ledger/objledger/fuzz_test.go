package objledger

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-s3/cairn/objstore/mem"
)

// FuzzDocuments: whatever bytes sit in a head, a base or the work index, the
// ledger answers with an error naming the document (errCorrupt) or a usable
// decoding, never a panic; and a decoded head survives the operations run on it.
func FuzzDocuments(f *testing.F) {
	f.Add([]byte(`{"seq":3,"rows":{"b/k":{"b":"b","k":"k","st":"pending","nx":5,"ch":3}},"work":{"b/k":5}}`))
	f.Add([]byte(`{"rows":{"b/k":null}}`))
	f.Add([]byte(`{"base":"shards/000/base-x.json","rows":{}}`))
	f.Add([]byte(`{"due":{"000":12},"mark":{"000":"m"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"rows":{"x":{"del":true}},"work":{"y":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := mem.Open()
		_, _ = s.PutBytes(context.Background(), "shards/000/base-x.json", data, nil)
		l := &Backend{s: s, heads: make([]cachedHead, 1), bases: map[string]*segment{}, shards: 1}
		h, err := l.decodeHead(context.Background(), 0, data)
		if err != nil && !errors.Is(err, errCorrupt) && !errors.Is(err, errBaseGone) {
			t.Fatalf("decodeHead: %v is neither corrupt nor a missing base", err)
		}
		if err == nil {
			h.Work.min()
			h.each(func(string, *row) {})
			l.claimIn(h, 1<<40, 10, 1)
			var ids []string
			h.Work.ids(func(rid string) bool { ids = append(ids, rid); return true })
			for _, rid := range ids {
				h.remove(rid)
			}
			if _, err := l.encodeHead(0, h); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := decodeIndex(data); err != nil && !errors.Is(err, errCorrupt) {
			t.Fatalf("decodeIndex: %v", err)
		}
		_, _, _ = ParseURL(string(data))
	})
}
