// Package pathlocktest holds what the path-lock tests of packages pathlock and
// treelock share: the brute-force rule a hierarchical lock must implement, and
// every small request over a small tree.
package pathlocktest

import (
	"slices"
	"strings"

	"github.com/cairn-s3/cairn/lock/pathlock"
)

// Related reports whether one path is the other or an ancestor of it.
func Related(a, b string) bool {
	under := func(x, y string) bool { return x == "/" || x == y || strings.HasPrefix(y, x+"/") }
	return under(a, b) || under(b, a)
}

// Conflict is the rule by brute force: some path of one request is in the
// lineage of a path of the other, and at least one of the two is a write.
func Conflict(x, y pathlock.Request) bool {
	for _, a := range append(slices.Clone(x.Read), x.Write...) {
		for _, b := range append(slices.Clone(y.Read), y.Write...) {
			if Related(a, b) && (slices.Contains(x.Write, a) || slices.Contains(y.Write, b)) {
				return true
			}
		}
	}
	return false
}

// Requests returns every request whose read set and write set each hold at
// most two of paths (and which is not empty).
func Requests(paths []string) []pathlock.Request {
	subsets := [][]string{nil}
	for i := range paths {
		subsets = append(subsets, []string{paths[i]})
		for j := i + 1; j < len(paths); j++ {
			subsets = append(subsets, []string{paths[i], paths[j]})
		}
	}
	var rs []pathlock.Request
	for _, r := range subsets {
		for _, w := range subsets {
			if len(r)+len(w) > 0 {
				rs = append(rs, pathlock.Request{Read: r, Write: w})
			}
		}
	}
	return rs
}
