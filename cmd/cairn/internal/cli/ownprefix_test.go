package cli

import (
	"slices"
	"testing"
)

// TestOwnPrefixes: serve skips, besides cairn's own prefixes at a bucket's
// root, where an s3:// ledger keeps itself and cairn's objects under an s3://
// store's prefix; a bare bucket's ledger (cairn-ledger/) and file:// URLs add
// nothing.
func TestOwnPrefixes(t *testing.T) {
	for _, tc := range []struct {
		ledger, store string
		want          map[string][]string
	}{
		{"s3://uploads/ledger/?endpoint=http://127.0.0.1:9000&shards=4", "", map[string][]string{"uploads": {"ledger/"}}},
		{"s3://uploads", "", map[string][]string{}},
		{"cairn-data/ledger.db", "s3://uploads/app/", map[string][]string{"uploads": {"app/cairn-probe/", "app/cairn-locks/", "app/cairn-journal/", "app/cairn-ledger/"}}},
		{"file:///srv/ledger", "/srv/bucket", map[string][]string{}},
	} {
		got := ownPrefixes(&serveFlags{ledgerURL: tc.ledger, storeURL: tc.store})
		if len(got) != len(tc.want) {
			t.Errorf("%s %s: %v, want %v", tc.ledger, tc.store, got, tc.want)
			continue
		}
		for b, ps := range tc.want {
			if !slices.Equal(got[b], ps) {
				t.Errorf("%s %s: %v, want %v", tc.ledger, tc.store, got, tc.want)
			}
		}
	}
}
