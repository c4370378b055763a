package cairn

import "strings"

// The key prefixes under which cairn keeps its own objects in a store, at the
// store's root (a store URL with a prefix, s3://bucket/app/, puts them under
// that prefix). They are defined here, below every package that writes them,
// so that the packages that write them and the intake that skips their events
// cannot disagree.
const (
	// ProbePrefix: the capability probe's scratch objects and its saved
	// verdict (package objstore, cairn probe).
	ProbePrefix = "cairn-probe/"
	// LockPrefix: lock documents (package folder's locks, package
	// lock/treelock's nodes and sessions under cairn-locks/tree/, cairn lock).
	LockPrefix = "cairn-locks/"
	// JournalPrefix: package folder's journals of moves and copies (cairn fs).
	JournalPrefix = "cairn-journal/"
	// LedgerPrefix: an object-store ledger (package ledger/objledger) kept in
	// a bucket named without a prefix (s3://bucket).
	LedgerPrefix = "cairn-ledger/"
)

// OwnPrefixes returns cairn's own key prefixes (ProbePrefix, LockPrefix,
// JournalPrefix, LedgerPrefix).
func OwnPrefixes() []string {
	return []string{ProbePrefix, LockPrefix, JournalPrefix, LedgerPrefix}
}

// OwnKey reports whether key is under one of cairn's own prefixes at the
// store's root, and which. Only the whole first path segment counts:
// "cairn-probe/x" is cairn's, "cairn-probe-x/y" and "data/cairn-locks/z" are
// not.
func OwnKey(key string) (prefix string, ok bool) {
	if !strings.HasPrefix(key, "cairn-") {
		return "", false
	}
	for _, p := range OwnPrefixes() {
		if strings.HasPrefix(key, p) {
			return p, true
		}
	}
	return "", false
}
